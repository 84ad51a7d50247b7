package webhook

import (
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Names shared by the injector, its manifests and its documentation.
const (
	// LabelInject is the per-pod toggle; only "true" injects.
	LabelInject = "fanout.dev/inject"
	// AnnotationKubeconfig names the client's kubeconfig path, when
	// neither its flags nor its KUBECONFIG say it.
	AnnotationKubeconfig = "fanout.dev/kubeconfig"
	// AnnotationEndpoints overrides Config.Endpoints for one pod.
	AnnotationEndpoints = "fanout.dev/endpoints"
	// AnnotationSidecarVolumes lists, comma-separated, volumes of the
	// client container that the sidecar mounts besides those the
	// injector picks (see sidecarMounts): for a kubeconfig naming files
	// in a volume the client also names on its command line.
	AnnotationSidecarVolumes = "fanout.dev/sidecar-volumes"
	// AnnotationHoldListener "true" adds `fanout hold` before the
	// sidecar: a second native sidecar that holds the listening socket
	// while fanout restarts, so that the client's connections wait
	// instead of being refused (docs/resilience.md, fanout restarts).
	AnnotationHoldListener = "fanout.dev/hold-listener"
	// AnnotationDiscoveryKubeconfig overrides the sidecar's
	// --discovery-kubeconfig for one pod: "in-cluster" (the pod's service
	// account, projected into the sidecar only when the pod does not mount
	// it) or an absolute path.
	AnnotationDiscoveryKubeconfig = "fanout.dev/discovery-kubeconfig"
	// AnnotationTLSServerName sets the sidecar's --tls-server-name.
	AnnotationTLSServerName = "fanout.dev/tls-server-name"
	// AnnotationCPURequest and its siblings override the injector's
	// --sidecar-cpu-request, --sidecar-cpu-limit,
	// --sidecar-memory-request and --sidecar-memory-limit for one pod.
	AnnotationCPURequest    = "fanout.dev/sidecar-cpu-request"
	AnnotationCPULimit      = "fanout.dev/sidecar-cpu-limit"
	AnnotationMemoryRequest = "fanout.dev/sidecar-memory-request"
	AnnotationMemoryLimit   = "fanout.dev/sidecar-memory-limit"
	// AnnotationInjected marks a mutated pod; its value lists the client
	// containers that were pointed at fanout.
	AnnotationInjected = "fanout.dev/injected"
	// LabelSidecar marks a pod that runs the injected sidecar, whatever
	// opted it in (its own label or its namespace's), so that a
	// PodMonitor can select every sidecar
	// (manifests/monitoring/podmonitor.yaml).
	LabelSidecar      = "fanout.dev/sidecar"
	LabelSidecarValue = "injected"
	// NamespaceEnabled and NamespaceHosted are the values of LabelInject
	// on a Namespace that switch injection on for the control-plane
	// clients in it (see Scope); LabelOptOut, on a pod there, keeps that
	// pod out.
	NamespaceEnabled = "enabled"
	NamespaceHosted  = "hosted"
	LabelOptOut      = "false"
	// annotationMirror marks the API copy of a static pod.
	annotationMirror = "kubernetes.io/config.mirror"

	// SidecarName is the injected init container's name.
	SidecarName = "fanout"
	// VolumeName is the emptyDir fanout writes the localhost kubeconfig to.
	VolumeName = "fanout-kubeconfig"
	// MountPath is where that emptyDir is mounted, in both containers.
	MountPath = "/var/run/fanout"
	// HolderName is the `fanout hold` init container's name, and
	// HoldVolumeName the emptyDir it and fanout share the socket through
	// (mounted at HoldMountPath in those two only, not in the client).
	HolderName     = "fanout-hold"
	HoldVolumeName = "fanout-hold"
	HoldMountPath  = "/var/run/fanout-hold"
	// KubeconfigPath is the localhost kubeconfig the client is pointed at.
	KubeconfigPath = MountPath + "/kubeconfig"
	// AdminPortName names the sidecar's admin port (for Prometheus).
	AdminPortName = "fanout-admin"
	// ServiceAccountDir is where the kubelet mounts the pod's token and CA.
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// DiscoveryVolumeName is the projected volume of the pod's own
	// service account token, the cluster CA and the namespace that the
	// sidecar alone mounts at ServiceAccountDir when its discovery uses
	// the pod's service account and the pod mounts none
	// (automountServiceAccountToken: false, as hosted control planes run
	// their clients).
	DiscoveryVolumeName = "fanout-discovery"
	// DiscoveryTokenSeconds is that token's lifetime; the kubelet renews
	// it at 80 %, and fanout re-reads the file.
	DiscoveryTokenSeconds = 3600
	// PodNamespaceEnv is the sidecar's environment variable holding the
	// pod's namespace (downward API), which HostedEndpoints names.
	PodNamespaceEnv = "FANOUT_POD_NAMESPACE"
	// HostedEndpoints is a hosted control plane client's --endpoints: the
	// EndpointSlices of the Service its kubeconfig's server names, in the
	// pod's own namespace (https://kube-apiserver in Gardener), read in
	// the hosting cluster with the pod's service account.
	HostedEndpoints = "endpointslice:///$(" + PodNamespaceEnv + ")/*"
	// DiscoveryInCluster is fanout's --discovery-kubeconfig value for the
	// pod's service account.
	DiscoveryInCluster = "in-cluster"
)

// DefaultHostedPodLabels are added to hosted control plane pods the
// injector mutates (Scope hosted), unless the pod sets them: Gardener's
// NetworkPolicy label that lets a seed pod reach the seed's (the hosting
// cluster's) kube-apiserver, where the sidecar reads the EndpointSlices.
// Egress to the kube-apiserver pods themselves is what the client already
// has (networking.resources.gardener.cloud/to-kube-apiserver-tcp-443).
var DefaultHostedPodLabels = map[string]string{"networking.gardener.cloud/to-runtime-apiserver": "allowed"}

// Config is how the injector builds sidecars. It is immutable once the
// injector runs, so Mutate is safe for concurrent use.
type Config struct {
	// Image and ImagePullPolicy of the sidecar.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Endpoints is the default --endpoints; "" leaves fanout's default
	// (the kubeconfig's server). AnnotationEndpoints overrides it.
	Endpoints string
	// ListenPort is the sidecar's loopback client port; AdminPort its
	// admin port (probes, /metrics).
	ListenPort int32
	AdminPort  int32
	// Resources of the sidecar.
	Resources corev1.ResourceRequirements
	// MaxShutdownGrace caps --shutdown-grace; see ShutdownGrace.
	MaxShutdownGrace time.Duration
	// RunAsUser and RunAsGroup apply when the client container sets
	// neither (at container or pod level): the image's nonroot user.
	RunAsUser  int64
	RunAsGroup int64
	// ExtraArgs are appended to the sidecar's arguments.
	ExtraArgs []string
	// HostedPodLabels are set on pods injected in Scope hosted, where
	// the pod has no such label yet (NetworkPolicy selectors).
	HostedPodLabels map[string]string
}

// DefaultConfig returns the defaults of fanout-injector's flags.
func DefaultConfig() Config {
	return Config{
		ImagePullPolicy:  corev1.PullIfNotPresent,
		ListenPort:       7080,
		AdminPort:        7081,
		MaxShutdownGrace: 10 * time.Second,
		RunAsUser:        65532,
		RunAsGroup:       65532,
		HostedPodLabels:  maps.Clone(DefaultHostedPodLabels),
	}
}

// Validate checks the configuration and says what to change.
func (c Config) Validate() error {
	var errs []error
	if c.Image == "" {
		errs = append(errs, errors.New("the sidecar image is required (--sidecar-image)"))
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("image pull policy %q: use Always, IfNotPresent or Never", c.ImagePullPolicy))
	}
	for _, p := range []struct {
		flag string
		v    int32
	}{{"--sidecar-listen-port", c.ListenPort}, {"--sidecar-admin-port", c.AdminPort}} {
		if p.v < 1 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("%s %d is not a port (1-65535)", p.flag, p.v))
		}
	}
	if c.ListenPort == c.AdminPort {
		errs = append(errs, fmt.Errorf("--sidecar-listen-port and --sidecar-admin-port are both %d: they must differ", c.ListenPort))
	}
	if c.MaxShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("--max-shutdown-grace must not be negative, got %s", c.MaxShutdownGrace))
	}
	if c.RunAsUser <= 0 || c.RunAsGroup < 0 {
		errs = append(errs, fmt.Errorf("--sidecar-run-as-user must be a non-root uid, got %d (group %d)", c.RunAsUser, c.RunAsGroup))
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okR := c.Resources.Requests[name]
		lim, okL := c.Resources.Limits[name]
		if okR && okL && req.Cmp(lim) > 0 {
			errs = append(errs, fmt.Errorf("sidecar %s request %s exceeds its limit %s", name, req.String(), lim.String()))
		}
	}
	return errors.Join(errs...)
}
