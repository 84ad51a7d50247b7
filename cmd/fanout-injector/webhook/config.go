package webhook

import (
	"errors"
	"fmt"
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
	// AnnotationInjected marks a mutated pod; its value lists the client
	// containers that were pointed at fanout.
	AnnotationInjected = "fanout.dev/injected"
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
)

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
