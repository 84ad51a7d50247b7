package injector

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Reason says why a pod was not mutated. The values are metric labels: a
// fixed, small set.
type Reason string

const (
	// ReasonNotLabelled: the pod lacks fanout.dev/inject="true" (the
	// webhook's objectSelector should have kept it away).
	ReasonNotLabelled Reason = "not-labelled"
	// ReasonAlreadyInjected: a re-invocation; nothing to do.
	ReasonAlreadyInjected Reason = "already-injected"
	// ReasonMirrorPod: the API copy of a static pod; the kubelet runs the
	// manifest on disk, not this object.
	ReasonMirrorPod Reason = "mirror-pod"
	// ReasonHostNetwork: loopback is the node's, shared with every other
	// host-network pod, so fanout's credential-carrying listener would be
	// open to all of them.
	ReasonHostNetwork Reason = "host-network"
	// ReasonNoKubeconfig: no annotation, flag, KUBECONFIG or service
	// account token says how the client reaches kube-apiserver.
	ReasonNoKubeconfig Reason = "no-kubeconfig"
	// ReasonConflict: the pod's settings contradict each other or the
	// sidecar's (names, ports, paths).
	ReasonConflict Reason = "conflict"
	// ReasonInvalid: the request could not be decoded as a Pod.
	ReasonInvalid Reason = "invalid"
)

// Reasons lists every Reason, so that metrics start at zero.
var Reasons = []Reason{ReasonNotLabelled, ReasonAlreadyInjected, ReasonMirrorPod, ReasonHostNetwork, ReasonNoKubeconfig, ReasonConflict, ReasonInvalid}

// Decision is the outcome of Mutate.
type Decision struct {
	// Mutated is true when the returned pod differs from the input.
	Mutated bool
	// Reason is why not, when !Mutated.
	Reason Reason
	// Warning is for the admission response: set when the pod asked for
	// injection and did not get it for a reason its owner must fix.
	Warning string
	// Clients are the containers pointed at fanout; InCluster is true
	// when fanout uses the pod's service account.
	Clients   []string
	InCluster bool
}

// kubeconfigFlags are the flags a client reads its kubeconfig from.
// kube-controller-manager and kube-scheduler also name the same file in the
// delegated authentication and authorization flags.
var kubeconfigFlags = []string{"kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"}

// Mutate returns a mutated deep copy of pod with the fanout sidecar, or pod
// itself and the reason it was left alone. It is pure and idempotent:
// mutating its own output changes nothing.
func (c Config) Mutate(pod *corev1.Pod) (*corev1.Pod, Decision) {
	if pod.Labels[LabelInject] != "true" {
		return pod, Decision{Reason: ReasonNotLabelled}
	}
	if _, ok := pod.Annotations[AnnotationInjected]; ok {
		return pod, Decision{Reason: ReasonAlreadyInjected}
	}
	if _, ok := pod.Annotations[annotationMirror]; ok {
		return pod, skip(ReasonMirrorPod, "mirror pod of a static pod: the kubelet runs the manifest on disk, not this object; add fanout to the manifest by hand (docs/static-pods.md)")
	}
	if pod.Spec.HostNetwork {
		return pod, skip(ReasonHostNetwork, "hostNetwork pod: its loopback is the node's, so any process on the node could use the client's credentials through fanout; run the client without hostNetwork")
	}
	if msg := c.conflicts(pod); msg != "" {
		return pod, skip(ReasonConflict, msg)
	}
	t, reason, msg := findTarget(pod)
	if reason != "" {
		return pod, skip(reason, msg)
	}
	endpoints := c.Endpoints
	if v, ok := pod.Annotations[AnnotationEndpoints]; ok {
		v = strings.TrimSpace(v)
		if v == "" || strings.ContainsAny(v, " \t\r\n") {
			return pod, skip(ReasonConflict, fmt.Sprintf("annotation %s=%q is not a fanout --endpoints value (no spaces; e.g. https://10.0.0.11:6443,https://10.0.0.12:6443)", AnnotationEndpoints, v))
		}
		endpoints = v
	}

	out := pod.DeepCopy()
	first := &out.Spec.Containers[t.clients[0]]
	var names []string
	for _, i := range t.clients {
		ct := &out.Spec.Containers[i]
		names = append(names, ct.Name)
		pointAtFanout(ct, t.path, t.addEnv)
		ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true})
	}
	// first's mounts now end with ours; the sidecar copies the others.
	clientMounts := first.VolumeMounts[:len(first.VolumeMounts)-1]
	out.Spec.InitContainers = append(out.Spec.InitContainers, c.sidecar(out, first, clientMounts, t, endpoints))
	out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{
		Name: VolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse("1Mi")),
		}},
	})
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationInjected] = strings.Join(names, ",")
	return out, Decision{Mutated: true, Clients: names, InCluster: t.path == ""}
}

func skip(r Reason, msg string) Decision {
	return Decision{Reason: r, Warning: "fanout-injector did not inject this pod: " + msg}
}

// conflicts reports what in the pod would clash with the sidecar.
func (c Config) conflicts(pod *corev1.Pod) string {
	if pod.Spec.OS != nil && pod.Spec.OS.Name == corev1.Windows {
		return "Windows pods are not supported"
	}
	all := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	for _, ct := range all {
		if ct.Name == SidecarName {
			return fmt.Sprintf("the pod already has a container named %q; rename it", SidecarName)
		}
		for _, p := range ct.Ports {
			if p.ContainerPort == c.ListenPort || p.ContainerPort == c.AdminPort || p.Name == AdminPortName {
				return fmt.Sprintf("container %q declares port %d (%s), which the sidecar uses (ports %d and %d); change the container or the injector's --sidecar-*-port", ct.Name, p.ContainerPort, p.Name, c.ListenPort, c.AdminPort)
			}
		}
		for _, m := range ct.VolumeMounts {
			if m.Name == VolumeName || path.Clean(m.MountPath) == MountPath {
				return fmt.Sprintf("container %q mounts %s or volume %s, which the sidecar uses", ct.Name, MountPath, VolumeName)
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == VolumeName {
			return fmt.Sprintf("the pod already has a volume named %q", VolumeName)
		}
	}
	return ""
}

// target is the client's kubeconfig: path ("" for in-cluster), the
// containers that use it, and whether they need KUBECONFIG set because
// nothing in their spec names the file.
type target struct {
	path    string
	clients []int
	addEnv  bool
}

// containerRefs is what one container says about its kubeconfig.
type containerRefs struct {
	kubeconfig []string // --kubeconfig values, in order
	any        []string // values of every kubeconfig flag
	env        *corev1.EnvVar
	sa         bool // mounts the service account token
}

func refsOf(ct *corev1.Container) containerRefs {
	var r containerRefs
	for _, list := range [][]string{ct.Command, ct.Args} {
		for _, f := range flagRefs(list) {
			v := f.value(list)
			if v == "" {
				// --kubeconfig="" means no kubeconfig, as in client-go.
				continue
			}
			if f.name == "kubeconfig" {
				r.kubeconfig = append(r.kubeconfig, v)
			}
			r.any = append(r.any, v)
		}
	}
	for i := range ct.Env {
		if ct.Env[i].Name == "KUBECONFIG" {
			r.env = &ct.Env[i]
		}
	}
	for _, m := range ct.VolumeMounts {
		if path.Clean(m.MountPath) == ServiceAccountDir {
			r.sa = true
		}
	}
	return r
}

// findTarget finds the client's kubeconfig: the annotation, else a
// --kubeconfig flag, else KUBECONFIG, else the service account token.
func findTarget(pod *corev1.Pod) (target, Reason, string) {
	refs := make([]containerRefs, len(pod.Spec.Containers))
	for i := range pod.Spec.Containers {
		refs[i] = refsOf(&pod.Spec.Containers[i])
	}
	name := func(i int) string { return pod.Spec.Containers[i].Name }

	if p, ok := pod.Annotations[AnnotationKubeconfig]; ok {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return target{}, ReasonConflict, fmt.Sprintf("annotation %s=%q is not a clean absolute path", AnnotationKubeconfig, p)
		}
		t := target{path: p}
		for i, r := range refs {
			for _, v := range r.kubeconfig {
				if v != p {
					return target{}, ReasonConflict, fmt.Sprintf("container %q passes --kubeconfig=%s but annotation %s says %s", name(i), v, AnnotationKubeconfig, p)
				}
			}
			if r.env != nil && len(r.kubeconfig) == 0 && (r.env.ValueFrom != nil || (r.env.Value != "" && r.env.Value != p)) {
				return target{}, ReasonConflict, fmt.Sprintf("container %q sets KUBECONFIG to something else than annotation %s=%s", name(i), AnnotationKubeconfig, p)
			}
			if slices.Contains(r.any, p) || (r.env != nil && r.env.Value == p) {
				t.clients = append(t.clients, i)
			}
		}
		if len(t.clients) == 0 {
			// Nothing names the file: the client finds it itself, so
			// KUBECONFIG is what can redirect it.
			t.clients, t.addEnv = []int{0}, true
		}
		return t, "", ""
	}

	var t target
	for i, r := range refs {
		for _, v := range r.kubeconfig {
			if t.path != "" && v != t.path {
				return target{}, ReasonConflict, fmt.Sprintf("containers pass different --kubeconfig values (%s and %s); fanout serves one client identity per pod: set annotation %s", t.path, v, AnnotationKubeconfig)
			}
			t.path = v
		}
		if len(r.kubeconfig) > 0 {
			t.clients = append(t.clients, i)
		}
	}
	if t.path != "" {
		if !path.IsAbs(t.path) {
			return target{}, ReasonConflict, fmt.Sprintf("--kubeconfig=%s is relative; the sidecar has another working directory: use an absolute path", t.path)
		}
		return t, "", ""
	}

	for i, r := range refs {
		if r.env == nil {
			continue
		}
		switch {
		case r.env.ValueFrom != nil:
			return target{}, ReasonConflict, fmt.Sprintf("container %q sets KUBECONFIG from a reference the injector cannot read: set annotation %s", name(i), AnnotationKubeconfig)
		case strings.Contains(r.env.Value, ":"):
			return target{}, ReasonConflict, fmt.Sprintf("container %q sets KUBECONFIG to a list of files; fanout reads one: set annotation %s", name(i), AnnotationKubeconfig)
		case r.env.Value == "":
			continue
		case !path.IsAbs(r.env.Value):
			return target{}, ReasonConflict, fmt.Sprintf("container %q sets KUBECONFIG=%s, a relative path: use an absolute path", name(i), r.env.Value)
		case t.path != "" && r.env.Value != t.path:
			return target{}, ReasonConflict, fmt.Sprintf("containers set different KUBECONFIG values (%s and %s): set annotation %s", t.path, r.env.Value, AnnotationKubeconfig)
		}
		t.path = r.env.Value
		t.clients = append(t.clients, i)
	}
	if t.path != "" {
		return t, "", ""
	}

	t = target{}
	for i, r := range refs {
		if r.sa {
			t.clients = append(t.clients, i)
		}
	}
	if len(t.clients) > 0 {
		t.addEnv = true
		return t, "", ""
	}
	return target{}, ReasonNoKubeconfig, fmt.Sprintf("no container names a kubeconfig (--kubeconfig, KUBECONFIG) or mounts a service account token, and annotation %s is not set", AnnotationKubeconfig)
}

// flagRef is one kubeconfig flag in a command or argument list: at index i,
// either --name=value (inline) or --name value.
type flagRef struct {
	name   string
	i      int
	inline bool
}

func (f flagRef) value(list []string) string {
	if f.inline {
		_, v, _ := strings.Cut(list[f.i], "=")
		return v
	}
	return list[f.i+1]
}

func (f flagRef) set(list []string, v string) {
	if f.inline {
		k, _, _ := strings.Cut(list[f.i], "=")
		list[f.i] = k + "=" + v
		return
	}
	list[f.i+1] = v
}

// flagRefs finds kubeconfig flags in one list, as pflag and Go's flag
// package parse them (one or two dashes), up to a "--" terminator.
func flagRefs(list []string) []flagRef {
	var out []flagRef
	for i := 0; i < len(list); i++ {
		a := list[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		bare := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		k, _, inline := strings.Cut(bare, "=")
		if !slices.Contains(kubeconfigFlags, k) {
			continue
		}
		if inline {
			out = append(out, flagRef{name: k, i: i, inline: true})
		} else if i+1 < len(list) {
			out = append(out, flagRef{name: k, i: i})
			i++
		}
	}
	return out
}

// pointAtFanout rewrites every kubeconfig flag and KUBECONFIG naming path to
// KubeconfigPath, and sets KUBECONFIG when addEnv.
func pointAtFanout(ct *corev1.Container, p string, addEnv bool) {
	if p != "" {
		for _, list := range [][]string{ct.Command, ct.Args} {
			for _, f := range flagRefs(list) {
				if f.value(list) == p {
					f.set(list, KubeconfigPath)
				}
			}
		}
		for i := range ct.Env {
			if ct.Env[i].Name == "KUBECONFIG" && ct.Env[i].ValueFrom == nil && ct.Env[i].Value == p {
				ct.Env[i].Value = KubeconfigPath
			}
		}
	}
	if addEnv {
		ct.Env = slices.DeleteFunc(ct.Env, func(e corev1.EnvVar) bool { return e.Name == "KUBECONFIG" })
		ct.Env = append(ct.Env, corev1.EnvVar{Name: "KUBECONFIG", Value: KubeconfigPath})
	}
}

// ShutdownGrace is the sidecar's --shutdown-grace for pod. A native sidecar
// gets SIGTERM only after the client has exited, inside the same
// terminationGracePeriodSeconds (default 30s). The client is given the first
// half; fanout's stop takes at most its grace plus 5 s (its stop timeout),
// and that must fit in the second half. The result is capped at limit.
func ShutdownGrace(pod *corev1.Pod, limit time.Duration) time.Duration {
	period := 30 * time.Second
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		period = time.Duration(*s) * time.Second
	}
	g := max(period/2-5*time.Second, 0)
	return min(limit, g).Truncate(time.Second)
}

// sidecar builds the fanout init container for client.
func (c Config) sidecar(pod *corev1.Pod, client *corev1.Container, clientMounts []corev1.VolumeMount, t target, endpoints string) corev1.Container {
	var args []string
	if t.path == "" {
		args = append(args, "--in-cluster")
	} else {
		args = append(args, "--kubeconfig="+t.path)
	}
	if endpoints != "" {
		args = append(args, "--endpoints="+endpoints)
	}
	args = append(args,
		fmt.Sprintf("--listen-address=127.0.0.1:%d", c.ListenPort),
		fmt.Sprintf("--admin-address=:%d", c.AdminPort),
		"--write-kubeconfig="+KubeconfigPath,
		"--shutdown-grace="+ShutdownGrace(pod, c.MaxShutdownGrace).String(),
	)
	args = append(args, c.ExtraArgs...)

	var mounts []corev1.VolumeMount
	for _, m := range clientMounts {
		if t.path == "" && path.Clean(m.MountPath) != ServiceAccountDir {
			// In-cluster, the token and CA are all fanout needs.
			continue
		}
		m.ReadOnly = true
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			// Bidirectional needs a privileged container; the sidecar
			// only reads.
			m.MountPropagation = nil
		}
		mounts = append(mounts, m)
	}
	mounts = append(mounts, corev1.VolumeMount{Name: VolumeName, MountPath: MountPath})

	// The sidecar reads the client's files, so it runs as the client
	// unless that is root. A client that sets a user but no group gets its
	// group from the runtime (the user's entry in the image's /etc/passwd,
	// else group 0), and may read its files through that group, such as a
	// root-owned 0440 Secret: the sidecar then sets no group either, so
	// the runtime resolves it alike. The injector's group applies only
	// with its user.
	uid, gid := c.RunAsUser, ptr.To(c.RunAsGroup)
	clientUser := false
	var clientGroup *int64
	podUser, podGroup := podIDs(pod.Spec.SecurityContext)
	ctUser, ctGroup := containerIDs(client.SecurityContext)
	for _, ids := range [][2]*int64{{podUser, podGroup}, {ctUser, ctGroup}} {
		if u := ids[0]; u != nil && *u > 0 {
			uid, clientUser = *u, true
		}
		if g := ids[1]; g != nil {
			clientGroup = g
		}
	}
	switch {
	case clientGroup != nil:
		gid = ptr.To(*clientGroup)
	case clientUser:
		gid = nil
	}
	probe := func(p string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: p, Port: intstr.FromInt32(c.AdminPort), Scheme: corev1.URISchemeHTTP,
			}},
			TimeoutSeconds: 1, PeriodSeconds: period, SuccessThreshold: 1, FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:            SidecarName,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Args:            args,
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports:           []corev1.ContainerPort{{Name: AdminPortName, ContainerPort: c.AdminPort, Protocol: corev1.ProtocolTCP}},
		// /startupz passes once the listener is bound and the kubeconfig
		// written; it does not wait for an apiserver.
		StartupProbe:             probe("/startupz", 1, 120),
		LivenessProbe:            probe("/healthz", 10, 3),
		Resources:                *c.Resources.DeepCopy(),
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(uid),
			RunAsGroup:               gid,
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

func podIDs(sc *corev1.PodSecurityContext) (user, group *int64) {
	if sc == nil {
		return nil, nil
	}
	return sc.RunAsUser, sc.RunAsGroup
}

func containerIDs(sc *corev1.SecurityContext) (user, group *int64) {
	if sc == nil {
		return nil, nil
	}
	return sc.RunAsUser, sc.RunAsGroup
}
