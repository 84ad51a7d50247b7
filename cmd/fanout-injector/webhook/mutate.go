package webhook

import (
	"fmt"
	"maps"
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
	// ReasonOptedOut: a pod labelled fanout.dev/inject=false in a
	// namespace that opted in (the webhook's objectSelector should have
	// kept it away).
	ReasonOptedOut Reason = "opted-out"
	// ReasonNotAClient: in a namespace that opted in, a pod that names no
	// kubeconfig (etcd, the kube-apiserver pods, monitoring), or whose
	// only sign of being a client is a mounted service account token,
	// which most pods have without using it. Left alone without a
	// warning.
	ReasonNotAClient Reason = "not-a-client"
)

// Reasons lists every Reason, so that metrics start at zero.
var Reasons = []Reason{ReasonNotLabelled, ReasonAlreadyInjected, ReasonMirrorPod, ReasonHostNetwork, ReasonNoKubeconfig, ReasonConflict, ReasonInvalid, ReasonOptedOut, ReasonNotAClient}

// Scope is what opted a pod in: which entry of the
// MutatingWebhookConfiguration sent the review, told by its path.
type Scope string

const (
	// ScopePod: the pod's label fanout.dev/inject=true (path /mutate).
	// Every client the injector recognises is injected, in-cluster ones
	// included; anything else is admitted with a warning.
	ScopePod Scope = "pod"
	// ScopeNamespace: the namespace's label fanout.dev/inject=enabled
	// (path /mutate/namespace). Pods that name a kubeconfig (flag or
	// KUBECONFIG) are injected as with ScopePod; in-cluster clients only
	// when the pod is labelled fanout.dev/inject=true too; other pods
	// are left alone without a warning (ReasonNotAClient);
	// fanout.dev/inject=false on a pod keeps it out.
	ScopeNamespace Scope = "namespace"
	// ScopeHosted: the namespace's label fanout.dev/inject=hosted (path
	// /mutate/hosted), for the namespace of a hosted control plane in
	// the hosting cluster. As ScopeNamespace, and a kubeconfig client's
	// sidecar discovers the replicas of the Service its kubeconfig's
	// server names, beside it in the hosting cluster (HostedEndpoints),
	// with the pod's own service account projected into the sidecar
	// only; the pod gets Config.HostedPodLabels.
	ScopeHosted Scope = "hosted"
)

// ScopeOfPath maps a webhook path to its Scope; ok is false for an
// unknown path.
func ScopeOfPath(p string) (s Scope, ok bool) {
	switch p {
	case "/mutate":
		return ScopePod, true
	case "/mutate/namespace":
		return ScopeNamespace, true
	case "/mutate/hosted":
		return ScopeHosted, true
	}
	return "", false
}

// Decision is the outcome of Mutate and Patch.
type Decision struct {
	// Mutated is true when the sidecar was added.
	Mutated bool
	// Removed is true when the sidecar was taken out again: a webhook
	// after the injector made the injected pod hostNetwork (Reason is
	// then ReasonHostNetwork).
	Removed bool
	// Reason is why not, when !Mutated.
	Reason Reason
	// Warning is for the admission response: set when the pod asked for
	// injection and did not get it (or lost it) for a reason its owner
	// must fix.
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

// Mutate returns a mutated deep copy of pod, or pod itself and the reason
// it was left alone, for a pod opted in by its label (ScopePod). It is
// pure and idempotent: mutating its own output changes nothing.
func (c Config) Mutate(pod *corev1.Pod) (*corev1.Pod, Decision) {
	return c.MutateIn(pod, ScopePod)
}

// MutateIn is Mutate for a pod opted in by scope.
func (c Config) MutateIn(pod *corev1.Pod, scope Scope) (*corev1.Pod, Decision) {
	out, _, d := c.plan(pod, scope)
	return out, d
}

// Patch decides like MutateIn and returns the change as JSON Patch
// operations against the pod's JSON as kube-apiserver sent it: nil when
// the pod stays as it is.
func (c Config) Patch(pod *corev1.Pod, scope Scope) ([]PatchOp, Decision) {
	_, ops, d := c.plan(pod, scope)
	return ops, d
}

func (c Config) plan(pod *corev1.Pod, scope Scope) (*corev1.Pod, []PatchOp, Decision) {
	if d, ok := early(pod, scope); ok {
		return pod, nil, d
	}
	if _, ok := pod.Annotations[AnnotationInjected]; ok && pod.Spec.HostNetwork {
		return removeSidecar(pod)
	}
	left := func(r Reason, msg string) (*corev1.Pod, []PatchOp, Decision) { return pod, nil, skip(r, msg) }
	if scope != ScopePod && !isClient(pod) {
		return pod, nil, Decision{Reason: ReasonNotAClient}
	}
	if _, ok := pod.Annotations[annotationMirror]; ok {
		return left(ReasonMirrorPod, "mirror pod of a static pod: the kubelet runs the manifest on disk, not this object; add fanout to the manifest by hand (docs/static-pods.md)")
	}
	if pod.Spec.HostNetwork {
		return left(ReasonHostNetwork, "hostNetwork pod: its loopback is the node's, so any process on the node could use the client's credentials through fanout; run the client without hostNetwork")
	}
	if msg := c.conflicts(pod); msg != "" {
		return left(ReasonConflict, msg)
	}
	t, reason, msg := findTarget(pod)
	if reason != "" {
		return left(reason, msg)
	}
	set, msg := c.settings(pod, t, scope)
	if msg != "" {
		return left(ReasonConflict, msg)
	}
	first := &pod.Spec.Containers[t.clients[0]]
	mounts, msg := sidecarMounts(pod, first, t)
	if msg != "" {
		return left(ReasonConflict, msg)
	}
	if msg := c.unreadable(pod, first, t); msg != "" {
		return left(ReasonConflict, msg)
	}
	// Discovery as the pod's service account, which the pod does not
	// mount: the sidecar alone gets a token of it.
	projectToken := set.discovery == DiscoveryInCluster &&
		!slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == ServiceAccountDir })
	if projectToken {
		if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == DiscoveryVolumeName }) {
			return left(ReasonConflict, fmt.Sprintf("the pod already has a volume named %q, which the sidecar's discovery token uses", DiscoveryVolumeName))
		}
		mounts = append(slices.Clip(mounts), corev1.VolumeMount{Name: DiscoveryVolumeName, MountPath: ServiceAccountDir, ReadOnly: true})
	}
	sidecar := c.sidecar(pod, first, mounts, t, set)

	p := &patcher{pod: pod.DeepCopy()}
	var names []string
	for _, i := range t.clients {
		names = append(names, pod.Spec.Containers[i].Name)
		p.pointAtFanout(i, t.path, t.addEnv)
		ct := &p.pod.Spec.Containers[i]
		appendTo(p, &ct.VolumeMounts, containerPath(false, i)+"/volumeMounts",
			corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true})
	}
	if set.hold {
		// Native sidecars start in order: the holder binds first.
		appendTo(p, &p.pod.Spec.InitContainers, "/spec/initContainers", c.holder(&sidecar))
	}
	appendTo(p, &p.pod.Spec.InitContainers, "/spec/initContainers", sidecar)
	appendTo(p, &p.pod.Spec.Volumes, "/spec/volumes", corev1.Volume{
		Name: VolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse("1Mi")),
		}},
	})
	if set.hold {
		appendTo(p, &p.pod.Spec.Volumes, "/spec/volumes", corev1.Volume{
			Name: HoldVolumeName,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				SizeLimit: ptr.To(resource.MustParse("1Mi")),
			}},
		})
	}
	if projectToken {
		appendTo(p, &p.pod.Spec.Volumes, "/spec/volumes", discoveryVolume())
	}
	if scope == ScopeHosted {
		for _, k := range slices.Sorted(maps.Keys(c.HostedPodLabels)) {
			if _, ok := p.pod.Labels[k]; !ok {
				p.setLabel(k, c.HostedPodLabels[k])
			}
		}
	}
	p.setAnnotation(AnnotationInjected, strings.Join(names, ","))
	p.setLabel(LabelSidecar, LabelSidecarValue)
	return p.pod, p.ops, Decision{Mutated: true, Clients: names, InCluster: t.path == ""}
}

// removeSidecar undoes the injection of a pod that a later webhook made
// hostNetwork, seen on re-invocation. Left in place, the sidecar would
// serve the client's credentials in plaintext on the node's loopback, to
// every process on the node, and bind fixed ports there that a second
// injected pod on the node could not get (the sidecar's declared admin
// port also becomes a host port, which the scheduler then reserves). The
// pod ends as if it had been hostNetwork from the start: without fanout.
//
// The clients get their kubeconfig back: each kubeconfig flag and
// KUBECONFIG naming fanout's file names the sidecar's --kubeconfig again;
// with --in-cluster, the KUBECONFIG the injector set is removed.
func removeSidecar(pod *corev1.Pod) (*corev1.Pod, []PatchOp, Decision) {
	k := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarName })
	if k < 0 {
		// Nothing of fanout runs in this pod.
		return pod, nil, Decision{Reason: ReasonAlreadyInjected}
	}
	orig := ""
	for _, a := range pod.Spec.InitContainers[k].Args {
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			orig = v
		}
	}
	p := &patcher{pod: pod.DeepCopy()}
	var names []string
	for i := range p.pod.Spec.Containers {
		ct := &p.pod.Spec.Containers[i]
		if !slices.ContainsFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == VolumeName }) {
			continue
		}
		names = append(names, ct.Name)
		base := containerPath(false, i)
		if orig != "" {
			for _, l := range []struct {
				name string
				list []string
			}{{"command", ct.Command}, {"args", ct.Args}} {
				for _, f := range flagRefs(l.list) {
					if f.value(l.list) == KubeconfigPath {
						f.set(l.list, orig)
						p.replace(fmt.Sprintf("%s/%s/%d", base, l.name, f.valueIndex()), l.list[f.valueIndex()])
					}
				}
			}
		}
		for j := len(ct.Env) - 1; j >= 0; j-- {
			e := ct.Env[j]
			if e.Name != "KUBECONFIG" || e.ValueFrom != nil || e.Value != KubeconfigPath {
				continue
			}
			if orig != "" {
				ct.Env[j].Value = orig
				p.add(fmt.Sprintf("%s/env/%d/value", base, j), orig)
			} else {
				ct.Env = slices.Delete(ct.Env, j, j+1)
				p.remove(fmt.Sprintf("%s/env/%d", base, j))
			}
		}
	}
	// Mounts of the emptyDir go from every container, so that removing the
	// volume leaves none dangling.
	for _, init := range []bool{false, true} {
		list := p.pod.Spec.Containers
		if init {
			list = p.pod.Spec.InitContainers
		}
		for i := range list {
			if init && i == k {
				continue
			}
			ct := &list[i]
			for j := len(ct.VolumeMounts) - 1; j >= 0; j-- {
				if ct.VolumeMounts[j].Name == VolumeName {
					ct.VolumeMounts = slices.Delete(ct.VolumeMounts, j, j+1)
					p.remove(fmt.Sprintf("%s/volumeMounts/%d", containerPath(init, i), j))
				}
			}
		}
	}
	p.pod.Spec.InitContainers = slices.Delete(p.pod.Spec.InitContainers, k, k+1)
	p.remove(containerPath(true, k))
	if h := slices.IndexFunc(p.pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == HolderName }); h >= 0 {
		p.pod.Spec.InitContainers = slices.Delete(p.pod.Spec.InitContainers, h, h+1)
		p.remove(containerPath(true, h))
	}
	for j := len(p.pod.Spec.Volumes) - 1; j >= 0; j-- {
		if n := p.pod.Spec.Volumes[j].Name; n == VolumeName || n == HoldVolumeName {
			p.pod.Spec.Volumes = slices.Delete(p.pod.Spec.Volumes, j, j+1)
			p.remove(fmt.Sprintf("/spec/volumes/%d", j))
		}
	}
	p.deleteAnnotation(AnnotationInjected)
	p.deleteLabel(LabelSidecar)
	return p.pod, p.ops, Decision{
		Removed: true,
		Reason:  ReasonHostNetwork,
		Warning: "fanout-injector removed the fanout sidecar it had added: a later admission webhook made the pod hostNetwork, where fanout's plaintext listener would serve the client's credentials to every process on the node; " + strings.Join(names, ",") + " use their own kubeconfig again. Run the client without hostNetwork to keep fanout",
		Clients: names,
	}
}

// early decides what needs only the pod's labels, annotations and
// hostNetwork, which the handler decodes before the rest (Handler.Review):
// ok is false when the rest of the pod is needed.
func early(pod *corev1.Pod, scope Scope) (d Decision, ok bool) {
	switch label := pod.Labels[LabelInject]; {
	case scope == ScopePod && label != "true":
		return Decision{Reason: ReasonNotLabelled}, true
	case scope != ScopePod && label == LabelOptOut:
		return Decision{Reason: ReasonOptedOut}, true
	}
	if _, ok := pod.Annotations[AnnotationInjected]; ok && !pod.Spec.HostNetwork {
		return Decision{Reason: ReasonAlreadyInjected}, true
	}
	return Decision{}, false
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

// valueIndex is the index of the element holding the value.
func (f flagRef) valueIndex() int {
	if f.inline {
		return f.i
	}
	return f.i + 1
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

// pointAtFanout rewrites, in container i, every kubeconfig flag and
// KUBECONFIG naming path to KubeconfigPath, and sets KUBECONFIG when
// addEnv: in place where the container has it (empty, or from a reference
// that a later entry overrides), so that $(KUBECONFIG) references keep
// their order, else at the end.
func (p *patcher) pointAtFanout(i int, path string, addEnv bool) {
	ct := &p.pod.Spec.Containers[i]
	base := containerPath(false, i)
	if path != "" {
		for _, l := range []struct {
			name string
			list []string
		}{{"command", ct.Command}, {"args", ct.Args}} {
			for _, f := range flagRefs(l.list) {
				if f.value(l.list) == path {
					f.set(l.list, KubeconfigPath)
					p.replace(fmt.Sprintf("%s/%s/%d", base, l.name, f.valueIndex()), l.list[f.valueIndex()])
				}
			}
		}
		for j := range ct.Env {
			if ct.Env[j].Name == "KUBECONFIG" && ct.Env[j].ValueFrom == nil && ct.Env[j].Value == path {
				ct.Env[j].Value = KubeconfigPath
				p.add(fmt.Sprintf("%s/env/%d/value", base, j), KubeconfigPath)
			}
		}
	}
	if !addEnv {
		return
	}
	found := false
	for j := range ct.Env {
		if ct.Env[j].Name != "KUBECONFIG" {
			continue
		}
		found = true
		if ct.Env[j].ValueFrom != nil {
			ct.Env[j] = corev1.EnvVar{Name: "KUBECONFIG", Value: KubeconfigPath}
			p.replace(fmt.Sprintf("%s/env/%d", base, j), ct.Env[j])
			continue
		}
		ct.Env[j].Value = KubeconfigPath
		p.add(fmt.Sprintf("%s/env/%d/value", base, j), KubeconfigPath)
	}
	if !found {
		appendTo(p, &ct.Env, base+"/env", corev1.EnvVar{Name: "KUBECONFIG", Value: KubeconfigPath})
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

// sidecar builds the fanout init container for client, with mounts (from
// sidecarMounts) and the emptyDir it writes the localhost kubeconfig to.
func (c Config) sidecar(pod *corev1.Pod, client *corev1.Container, mounts []corev1.VolumeMount, t target, set settings) corev1.Container {
	var args []string
	if t.path == "" {
		args = append(args, "--in-cluster")
	} else {
		args = append(args, "--kubeconfig="+t.path)
	}
	if set.endpoints != "" {
		args = append(args, "--endpoints="+set.endpoints)
	}
	if set.discovery != "" {
		args = append(args, "--discovery-kubeconfig="+set.discovery)
	}
	if set.tlsServerName != "" {
		args = append(args, "--tls-server-name="+set.tlsServerName)
	}
	hold := set.hold
	args = append(args,
		fmt.Sprintf("--listen-address=127.0.0.1:%d", c.ListenPort),
		fmt.Sprintf("--admin-address=:%d", c.AdminPort),
		"--write-kubeconfig="+KubeconfigPath,
		"--shutdown-grace="+ShutdownGrace(pod, c.MaxShutdownGrace).String(),
		"--zone=$("+ZoneEnv+")",
	)
	if hold {
		args = append(args, "--listen-from="+HoldMountPath)
	}
	args = append(args, c.ExtraArgs...)
	mounts = append(slices.Clip(mounts), corev1.VolumeMount{Name: VolumeName, MountPath: MountPath})
	if hold {
		mounts = append(mounts, corev1.VolumeMount{Name: HoldVolumeName, MountPath: HoldMountPath})
	}
	uid, gid := c.Identity(pod, client)
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
		Env:             sidecarEnv(set.endpoints),
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports:           []corev1.ContainerPort{{Name: AdminPortName, ContainerPort: c.AdminPort, Protocol: corev1.ProtocolTCP}},
		// /startupz passes once the listener is bound and the kubeconfig
		// written; it does not wait for an apiserver.
		StartupProbe:             probe("/startupz", 1, 120),
		LivenessProbe:            probe("/healthz", 10, 3),
		Resources:                set.resources,
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(uid),
			RunAsGroup:               ptr.To(gid),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// wantsHolder reads AnnotationHoldListener, and says what clashes with
// the holder's container and volume names or mount path.
func (c Config) wantsHolder(pod *corev1.Pod) (bool, string) {
	v, ok := pod.Annotations[AnnotationHoldListener]
	switch {
	case !ok || v == "false":
		return false, ""
	case v != "true":
		return false, fmt.Sprintf("annotation %s=%q: want \"true\" or \"false\"", AnnotationHoldListener, v)
	}
	for _, ct := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if ct.Name == HolderName {
			return false, fmt.Sprintf("the pod already has a container named %q, which annotation %s adds; rename it", HolderName, AnnotationHoldListener)
		}
		for _, m := range ct.VolumeMounts {
			if m.Name == HoldVolumeName || path.Clean(m.MountPath) == HoldMountPath {
				return false, fmt.Sprintf("container %q mounts %s or volume %s, which annotation %s uses", ct.Name, HoldMountPath, HoldVolumeName, AnnotationHoldListener)
			}
		}
	}
	if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == HoldVolumeName }) {
		return false, fmt.Sprintf("the pod already has a volume named %q, which annotation %s adds", HoldVolumeName, AnnotationHoldListener)
	}
	return true, ""
}

// holder builds the `fanout hold` init container for sidecar: the same
// image and user (it hands the socket only to its own user ID), the
// sidecar's listen address, the shared emptyDir and nothing else. It
// idles at about 2 MiB of anonymous memory and no CPU.
func (c Config) holder(sidecar *corev1.Container) corev1.Container {
	return corev1.Container{
		Name:            HolderName,
		Image:           sidecar.Image,
		ImagePullPolicy: sidecar.ImagePullPolicy,
		Args: []string{"hold", "--socket-dir=" + HoldMountPath,
			fmt.Sprintf("--listen-address=127.0.0.1:%d", c.ListenPort)},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: HoldVolumeName, MountPath: HoldMountPath}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          sidecar.SecurityContext.DeepCopy(),
	}
}

// ZoneEnv is the sidecar's environment variable holding the pod's
// topology.kubernetes.io/zone label, which its --zone reads.
const ZoneEnv = "FANOUT_ZONE"

// zoneEnv passes the sidecar its zone through the downward API.
// kube-apiserver copies the node's topology.kubernetes.io/zone label onto
// the pod when it binds it (KEP-4742, admission plugin PodTopologyLabels,
// feature gate PodTopologyLabelsAdmission: beta and on by default since
// Kubernetes 1.35), before the kubelet starts any container, so the
// sidecar learns its zone without RBAC to read Nodes. Where the label is
// absent the variable is empty, --zone is empty and zone placement is
// off. A --zone in --sidecar-extra-args comes later on the command line,
// and wins.
func zoneEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: ZoneEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['topology.kubernetes.io/zone']"},
	}}
}

// Identity is the uid and gid the sidecar runs as for client: the
// client's own, so that it reads the kubeconfig and the files it names
// exactly as the client does. The client's are its container
// securityContext's runAsUser and runAsGroup, else the pod's. A uid set
// without a group gets gid 0 from the container runtime (when the image's
// /etc/passwd does not name the uid; the injector cannot see the image),
// and Kubernetes' secret, configMap and projected files are root-owned,
// often group-readable: the sidecar takes gid 0 too. gid 0 is a group,
// not root's privileges. A root client (uid 0) cannot be mirrored, since
// the sidecar never runs as root: it gets Config.RunAsUser with the
// client's group (0 unless set), which reads what the client's group can.
// A client that sets neither runs as its image's user, which the injector
// cannot see: Config.RunAsUser and Config.RunAsGroup.
func (c Config) Identity(pod *corev1.Pod, client *corev1.Container) (uid, gid int64) {
	var u, g *int64
	if psc := pod.Spec.SecurityContext; psc != nil {
		u, g = psc.RunAsUser, psc.RunAsGroup
	}
	if sc := client.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			u = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			g = sc.RunAsGroup
		}
	}
	if u == nil && g == nil {
		return c.RunAsUser, c.RunAsGroup
	}
	uid, gid = c.RunAsUser, 0
	if u != nil && *u > 0 {
		uid = *u
	}
	if g != nil {
		gid = *g
	}
	return uid, gid
}

// sidecarMounts picks, from client's mounts, the ones the sidecar gets,
// read-only. The injector cannot read the kubeconfig at admission, only
// the pod spec, so the rule works from paths:
//
//   - the mount holding the kubeconfig file (the deepest mount at the
//     file or a directory above it); none is a conflict, since a file in
//     the client's image is not in fanout's;
//   - the volumes listed in AnnotationSidecarVolumes;
//   - in-cluster, only the service account token mount;
//   - with a kubeconfig, every other mount of a secret, configMap,
//     projected, emptyDir or CSI volume that the client's command,
//     arguments and literal environment name no path in. A kubeconfig's
//     certificate-authority, client-certificate, client-key and tokenFile
//     are named inside the kubeconfig only, so the volumes holding them
//     (a Gardener-style token Secret mounted on its own, the service
//     account token) are never named on the command line; the client's
//     own key material is (kube-controller-manager's
//     --cluster-signing-key-file and --service-account-private-key-file in
//     /etc/kubernetes/pki), and stays out of the sidecar. hostPath
//     volumes (node files, sockets) and persistent or ephemeral claims
//     (data) stay out too.
//
// A kubeconfig naming a file in a volume this leaves out makes fanout
// exit at start with an error naming the file; list the volume in
// AnnotationSidecarVolumes.
func sidecarMounts(pod *corev1.Pod, client *corev1.Container, t target) ([]corev1.VolumeMount, string) {
	extra := map[string]bool{}
	if v, ok := pod.Annotations[AnnotationSidecarVolumes]; ok {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if !slices.ContainsFunc(client.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name }) {
				return nil, fmt.Sprintf("annotation %s names volume %q, which container %q does not mount; list volumes of the client's volumeMounts, separated by commas", AnnotationSidecarVolumes, name, client.Name)
			}
			extra[name] = true
		}
	}
	include := make([]bool, len(client.VolumeMounts))
	for i, m := range client.VolumeMounts {
		include[i] = extra[m.Name]
	}
	if t.path == "" {
		for i, m := range client.VolumeMounts {
			include[i] = include[i] || path.Clean(m.MountPath) == ServiceAccountDir
		}
	} else {
		holder := deepestMount(client.VolumeMounts, t.path)
		if holder < 0 {
			return nil, fmt.Sprintf("the kubeconfig %s is on no volume of container %q (it is part of the image), so the sidecar could not read it; mount it from a volume", t.path, client.Name)
		}
		include[holder] = true
		named := namedMounts(client)
		volumes := map[string]*corev1.Volume{}
		for i := range pod.Spec.Volumes {
			volumes[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
		}
		for i, m := range client.VolumeMounts {
			if v := volumes[m.Name]; v != nil && !named[i] && mayHoldKubeconfigFiles(v) {
				include[i] = true
			}
		}
	}
	var out []corev1.VolumeMount
	for i, m := range client.VolumeMounts {
		if !include[i] {
			continue
		}
		m.ReadOnly = true
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			// Bidirectional needs a privileged container; the sidecar
			// only reads.
			m.MountPropagation = nil
		}
		out = append(out, m)
	}
	return out, ""
}

// mayHoldKubeconfigFiles: the kinds of volume a kubeconfig's certificates,
// keys and token files come from.
func mayHoldKubeconfigFiles(v *corev1.Volume) bool {
	return v.Secret != nil || v.ConfigMap != nil || v.Projected != nil || v.EmptyDir != nil || v.CSI != nil
}

// deepestMount is the index of the mount p is seen through: the one with
// the longest mount path that is p or a directory above it; -1 for none.
func deepestMount(mounts []corev1.VolumeMount, p string) int {
	p = path.Clean(p)
	best, bestLen := -1, -1
	for i, m := range mounts {
		mp := path.Clean(m.MountPath)
		if (p == mp || mp == "/" || strings.HasPrefix(p, mp+"/")) && len(mp) > bestLen {
			best, bestLen = i, len(mp)
		}
	}
	return best
}

// namedMounts marks the mounts that hold a path ct names in its command,
// arguments or literal environment: whole words, values after "=", and
// elements of ","- or ":"-separated lists.
func namedMounts(ct *corev1.Container) []bool {
	named := make([]bool, len(ct.VolumeMounts))
	words := slices.Concat(ct.Command, ct.Args)
	for _, e := range ct.Env {
		if e.ValueFrom == nil {
			words = append(words, e.Value)
		}
	}
	for _, w := range words {
		_, after, _ := strings.Cut(w, "=")
		for _, s := range []string{w, after} {
			for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ':' }) {
				if !path.IsAbs(part) {
					continue
				}
				if i := deepestMount(ct.VolumeMounts, part); i >= 0 {
					named[i] = true
				}
			}
		}
	}
	return named
}

// unreadable says why the sidecar could not read the client's kubeconfig,
// where the pod spec shows it: the kubelet writes secret, configMap and
// projected files owned by root:root with the volume's modes (default
// 0644), or, with a pod fsGroup, group-owned by it and group-readable. A
// sidecar that cannot read its kubeconfig never starts, and neither does
// the client behind it; the pod is better off without fanout. This is
// the case of a root client (or one running as its image's user) and a
// kubeconfig only root can read: the sidecar never runs as root.
func (c Config) unreadable(pod *corev1.Pod, client *corev1.Container, t target) string {
	if t.path == "" {
		return ""
	}
	i := deepestMount(client.VolumeMounts, t.path)
	var v *corev1.Volume
	for j := range pod.Spec.Volumes {
		if pod.Spec.Volumes[j].Name == client.VolumeMounts[i].Name {
			v = &pod.Spec.Volumes[j]
		}
	}
	psc := pod.Spec.SecurityContext
	if v == nil || (psc != nil && psc.FSGroup != nil) {
		return ""
	}
	modes := fileModes(v)
	if len(modes) == 0 {
		// Not a kind whose file modes the spec gives.
		return ""
	}
	uid, gid := c.Identity(pod, client)
	inRoot := gid == 0 || (psc != nil && slices.Contains(psc.SupplementalGroups, 0))
	for _, m := range modes {
		if m&0o004 != 0 || (m&0o040 != 0 && inRoot) {
			// Some file of the volume is readable: it may be the
			// kubeconfig.
			return ""
		}
	}
	return fmt.Sprintf("the sidecar would run as %d:%d (it never runs as root) and could not read the kubeconfig %s: volume %q gives its root-owned files mode %#o and the pod has no fsGroup. "+
		"Run the client as a non-root runAsUser (the sidecar takes the same uid and gid), or make the files group-readable (defaultMode 0440) for group 0 or a pod fsGroup",
		uid, gid, t.path, v.Name, modes[0])
}

// fileModes lists the modes the kubelet gives the files of a secret,
// configMap or projected volume: its defaultMode (0644 when unset) and
// every item's own mode. nil for other kinds.
func fileModes(v *corev1.Volume) []int32 {
	var def *int32
	var items []corev1.KeyToPath
	switch {
	case v.Secret != nil:
		def, items = v.Secret.DefaultMode, v.Secret.Items
	case v.ConfigMap != nil:
		def, items = v.ConfigMap.DefaultMode, v.ConfigMap.Items
	case v.Projected != nil:
		def = v.Projected.DefaultMode
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				items = append(items, src.Secret.Items...)
			}
			if src.ConfigMap != nil {
				items = append(items, src.ConfigMap.Items...)
			}
		}
	default:
		return nil
	}
	modes := []int32{ptr.Deref(def, corev1.SecretVolumeSourceDefaultMode)}
	for _, it := range items {
		if it.Mode != nil {
			modes = append(modes, *it.Mode)
		}
	}
	return modes
}
