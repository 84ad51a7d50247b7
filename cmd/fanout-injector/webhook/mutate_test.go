package webhook

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func sidecarOf(t *testing.T, pod *corev1.Pod) *corev1.Container {
	t.Helper()
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == SidecarName {
			return &pod.Spec.InitContainers[i]
		}
	}
	t.Fatalf("no %s init container in %+v", SidecarName, pod.Spec.InitContainers)
	return nil
}

func envOf(ct *corev1.Container, name string) (string, bool) {
	for _, e := range ct.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestMutateKubeconfigDiscovery covers the order in which the kubeconfig is
// found and what is rewritten in each case.
func TestMutateKubeconfigDiscovery(t *testing.T) {
	const orig = "/etc/kubernetes/controller-manager.conf"
	type discoveryCase struct {
		name string
		pod  func() *corev1.Pod
		// want: the sidecar's identity argument, the client's args and
		// its KUBECONFIG ("" for unset) after mutation.
		wantIdentity string
		wantArgs     []string
		wantEnv      string
		wantClients  []string
	}
	// flagged: a kcmPod whose --kubeconfig names orig, so the sidecar
	// takes orig and all three flags are rewritten; env is the client's
	// KUBECONFIG after.
	flagged := func(name string, pod func() *corev1.Pod, env string) discoveryCase {
		return discoveryCase{
			name: name, pod: pod, wantIdentity: "--kubeconfig=" + orig,
			wantArgs: []string{
				"--kubeconfig=" + KubeconfigPath,
				"--authentication-kubeconfig=" + KubeconfigPath,
				"--authorization-kubeconfig", KubeconfigPath,
				"--leader-elect=true",
			},
			wantEnv: env, wantClients: []string{"kube-controller-manager"},
		}
	}
	// operator: an operatorPod whose kubeconfig the sidecar finds as
	// identity says; the client's args stay and its KUBECONFIG names the
	// sidecar's.
	operator := func(name string, pod func() *corev1.Pod, identity string) discoveryCase {
		return discoveryCase{
			name: name, pod: pod, wantIdentity: identity,
			wantArgs: []string{"--leader-elect"}, wantEnv: KubeconfigPath, wantClients: []string{"manager"},
		}
	}
	tests := []discoveryCase{
		flagged("flags, inline and two-argument forms, all three rewritten", kcmPod, ""),
		{
			name: "authentication kubeconfig naming another file is left alone",
			pod: edited(kcmPod, func(p *corev1.Pod) {
				p.Spec.Containers[0].Args[1] = "--authentication-kubeconfig=/etc/kubernetes/other.conf"
			}),
			wantIdentity: "--kubeconfig=" + orig,
			wantArgs: []string{
				"--kubeconfig=" + KubeconfigPath,
				"--authentication-kubeconfig=/etc/kubernetes/other.conf",
				"--authorization-kubeconfig", KubeconfigPath,
				"--leader-elect=true",
			},
			wantClients: []string{"kube-controller-manager"},
		},
		flagged("annotation wins over KUBECONFIG and rewrites the flags naming it", edited(kcmPod, func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationKubeconfig: orig}
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: orig}}
		}), KubeconfigPath),
		operator("annotation naming a file nothing references sets KUBECONFIG", edited(operatorPod, func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationKubeconfig: "/config/kubeconfig"}
		}), "--kubeconfig=/config/kubeconfig"),
		operator("annotation with an empty KUBECONFIG replaces it", edited(operatorPod, func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationKubeconfig: "/config/kubeconfig"}
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: ""}}
		}), "--kubeconfig=/config/kubeconfig"),
		flagged("flag wins over KUBECONFIG naming another file", edited(kcmPod, func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: "/elsewhere"}}
		}), "/elsewhere"),
		operator("KUBECONFIG alone", edited(operatorPod, func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: "/config/kubeconfig"}}
		}), "--kubeconfig=/config/kubeconfig"),
		operator("in-cluster: service account token", operatorPod, "--in-cluster"),
		{
			name: "flag in command, single dash",
			pod: edited(kcmPod, func(p *corev1.Pod) {
				p.Spec.Containers[0].Command = []string{"/bin/client", "-kubeconfig", "/etc/kubernetes/kcm/config"}
				p.Spec.Containers[0].Args = nil
				p.Spec.Containers[0].VolumeMounts[0].MountPath = "/etc/kubernetes/kcm"
			}),
			wantIdentity: "--kubeconfig=/etc/kubernetes/kcm/config",
			wantClients:  []string{"kube-controller-manager"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.pod()
			snapshot := in.DeepCopy()
			out, d := testConfig().Mutate(in)
			if !d.Mutated {
				t.Fatalf("not mutated: %+v", d)
			}
			if !reflect.DeepEqual(in, snapshot) {
				t.Fatal("Mutate modified its input")
			}
			if !slices.Equal(d.Clients, tt.wantClients) {
				t.Errorf("clients %v, want %v", d.Clients, tt.wantClients)
			}
			sc := sidecarOf(t, out)
			if sc.Args[0] != tt.wantIdentity {
				t.Errorf("sidecar identity %q, want %q (args %v)", sc.Args[0], tt.wantIdentity, sc.Args)
			}
			client := out.Spec.Containers[0]
			if tt.wantArgs != nil && !slices.Equal(client.Args, tt.wantArgs) {
				t.Errorf("client args\n got %q\nwant %q", client.Args, tt.wantArgs)
			}
			if tt.name == "flag in command, single dash" && !slices.Equal(client.Command, []string{"/bin/client", "-kubeconfig", KubeconfigPath}) {
				t.Errorf("client command %q", client.Command)
			}
			env, _ := envOf(&client, "KUBECONFIG")
			if env != tt.wantEnv {
				t.Errorf("client KUBECONFIG %q, want %q", env, tt.wantEnv)
			}
			last := client.VolumeMounts[len(client.VolumeMounts)-1]
			if last.Name != VolumeName || last.MountPath != MountPath || !last.ReadOnly {
				t.Errorf("client lacks the read-only %s mount: %+v", MountPath, client.VolumeMounts)
			}
			if out.Annotations[AnnotationInjected] != strings.Join(tt.wantClients, ",") {
				t.Errorf("annotation %s=%q", AnnotationInjected, out.Annotations[AnnotationInjected])
			}
			if got := out.Labels[LabelSidecar]; got != LabelSidecarValue {
				t.Errorf("label %s=%q, want %q: the sidecars' PodMonitor selects it", LabelSidecar, got, LabelSidecarValue)
			}
		})
	}
}

// TestMutateSidecar checks the sidecar itself: native sidecar, probes,
// mounts, security context, resources, arguments.
func TestMutateSidecar(t *testing.T) {
	cfg := testConfig()
	cfg.ExtraArgs = []string{"--balancer=round-robin"}
	out, d := cfg.Mutate(kcmPod())
	if !d.Mutated {
		t.Fatalf("not mutated: %+v", d)
	}
	sc := sidecarOf(t, out)
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("restartPolicy %v, want Always (native sidecar)", sc.RestartPolicy)
	}
	if sc.Image != cfg.Image || sc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s %s", sc.Image, sc.ImagePullPolicy)
	}
	wantArgs := []string{
		"--kubeconfig=/etc/kubernetes/controller-manager.conf",
		"--endpoints=endpointslice:///default/kubernetes",
		"--listen-address=127.0.0.1:7080",
		"--admin-address=:7081",
		"--write-kubeconfig=" + KubeconfigPath,
		"--shutdown-grace=10s",
		"--zone=$(FANOUT_ZONE)",
		"--balancer=round-robin",
	}
	if !slices.Equal(sc.Args, wantArgs) {
		t.Errorf("args\n got %q\nwant %q", sc.Args, wantArgs)
	}
	if p := sc.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/startupz" || p.HTTPGet.Port.IntValue() != 7081 {
		t.Errorf("startupProbe %+v, want GET /startupz on 7081", p)
	}
	if sc.ReadinessProbe != nil {
		t.Errorf("readinessProbe set: an apiserver outage would make every injected pod unready")
	}
	s := sc.SecurityContext
	switch {
	case s == nil:
		t.Fatal("no securityContext")
	case !ptr.Deref(s.RunAsNonRoot, false), ptr.Deref(s.RunAsUser, 0) != 65532,
		!ptr.Deref(s.ReadOnlyRootFilesystem, false), ptr.Deref(s.AllowPrivilegeEscalation, true),
		s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}),
		s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault,
		s.Privileged != nil:
		t.Errorf("securityContext %+v", s)
	}
	if !reflect.DeepEqual(sc.Resources, cfg.Resources) {
		t.Errorf("resources %+v", sc.Resources)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: "kubeconfig", MountPath: "/etc/kubernetes/controller-manager.conf", ReadOnly: true},
		{Name: VolumeName, MountPath: MountPath},
	}
	if !reflect.DeepEqual(sc.VolumeMounts, wantMounts) {
		t.Errorf("sidecar mounts\n got %+v\nwant %+v", sc.VolumeMounts, wantMounts)
	}
	v := out.Spec.Volumes[len(out.Spec.Volumes)-1]
	if v.Name != VolumeName || v.EmptyDir == nil {
		t.Errorf("last volume %+v, want the %s emptyDir", v, VolumeName)
	}

	// In-cluster, the sidecar gets the token mount only.
	out, _ = cfg.Mutate(operatorPod())
	sc = sidecarOf(t, out)
	if len(sc.VolumeMounts) != 2 || sc.VolumeMounts[0].MountPath != ServiceAccountDir || sc.VolumeMounts[1].Name != VolumeName || sc.Args[0] != "--in-cluster" {
		t.Errorf("in-cluster sidecar mounts %+v args %v", sc.VolumeMounts, sc.Args)
	}
	// The annotation overrides the default endpoints.
	p := kcmPod()
	p.Annotations = map[string]string{AnnotationEndpoints: "https://10.0.0.1:6443,https://10.0.0.2:6443"}
	out, _ = cfg.Mutate(p)
	if got := sidecarOf(t, out).Args[1]; got != "--endpoints=https://10.0.0.1:6443,https://10.0.0.2:6443" {
		t.Errorf("endpoints arg %q", got)
	}
	// No default and no annotation: fanout's own default (no flag).
	cfg.Endpoints = ""
	out, _ = cfg.Mutate(kcmPod())
	for _, a := range sidecarOf(t, out).Args {
		if strings.HasPrefix(a, "--endpoints") {
			t.Errorf("unexpected %s without a default or annotation", a)
		}
	}
}

// TestMutateSkips: pods that cannot be handled stay as they are, with the
// reason and, where the owner must act, a warning.
func TestMutateSkips(t *testing.T) {
	tests := []struct {
		name        string
		pod         func() *corev1.Pod
		reason      Reason
		warn        string // substring; "" means no warning
		wantWarning bool
	}{
		{name: "no label", pod: edited(kcmPod, func(p *corev1.Pod) { delete(p.Labels, LabelInject) }), reason: ReasonNotLabelled},
		{name: "label false", pod: edited(kcmPod, func(p *corev1.Pod) { p.Labels[LabelInject] = "false" }), reason: ReasonNotLabelled},
		{name: "mirror pod", pod: edited(kcmPod, func(p *corev1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.mirror": "abc"} }), reason: ReasonMirrorPod, warn: "static-pods.md"},
		{name: "host network", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.HostNetwork = true }), reason: ReasonHostNetwork, warn: "hostNetwork"},
		{name: "nothing found", pod: edited(operatorPod, func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[1:] }), reason: ReasonNoKubeconfig, warn: AnnotationKubeconfig},
		{name: "empty --kubeconfig and no token", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--kubeconfig", ""} }), reason: ReasonNoKubeconfig, warn: AnnotationKubeconfig},
		{name: "two containers, two kubeconfigs", pod: edited(kcmPod, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "other", Image: "x", Args: []string{"--kubeconfig=/other"}})
		}), reason: ReasonConflict, warn: "different --kubeconfig"},
		{name: "flag repeated with another value", pod: edited(kcmPod, func(p *corev1.Pod) {
			p.Spec.Containers[0].Args = append(p.Spec.Containers[0].Args, "--kubeconfig=/other")
		}), reason: ReasonConflict, warn: "different --kubeconfig"},
		{name: "annotation contradicts the flag", pod: edited(kcmPod, func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationKubeconfig: "/other"} }), reason: ReasonConflict, warn: "annotation"},
		{name: "relative annotation", pod: edited(kcmPod, func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationKubeconfig: "conf"} }), reason: ReasonConflict, warn: "absolute"},
		{name: "relative flag", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--kubeconfig=conf"} }), reason: ReasonConflict, warn: "relative"},
		{name: "KUBECONFIG list", pod: edited(operatorPod, func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: "/a:/b"}} }), reason: ReasonConflict, warn: "list"},
		{name: "KUBECONFIG from a reference", pod: edited(operatorPod, func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		}), reason: ReasonConflict, warn: "reference"},
		{name: "port taken", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7081}} }), reason: ReasonConflict, warn: "7081"},
		{name: "container name taken", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: SidecarName, Image: "x"}} }), reason: ReasonConflict, warn: "named"},
		{name: "volume name taken", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: VolumeName}) }), reason: ReasonConflict, warn: VolumeName},
		{name: "mount path taken", pod: edited(kcmPod, func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "k8s-certs", MountPath: MountPath + "/"})
		}), reason: ReasonConflict, warn: MountPath},
		{name: "bad endpoints annotation", pod: edited(kcmPod, func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationEndpoints: "https://a:1, https://b:1"}
		}), reason: ReasonConflict, warn: AnnotationEndpoints},
		{name: "windows", pod: edited(kcmPod, func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }), reason: ReasonConflict, warn: "Windows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.pod()
			snapshot := in.DeepCopy()
			out, d := testConfig().Mutate(in)
			if d.Mutated || d.Reason != tt.reason {
				t.Fatalf("decision %+v, want skipped for %s", d, tt.reason)
			}
			if !reflect.DeepEqual(out, snapshot) || !reflect.DeepEqual(in, snapshot) {
				t.Fatal("a skipped pod was modified")
			}
			if tt.warn == "" && d.Warning != "" {
				t.Errorf("unexpected warning %q", d.Warning)
			}
			if tt.warn != "" && !strings.Contains(d.Warning, tt.warn) {
				t.Errorf("warning %q does not mention %q", d.Warning, tt.warn)
			}
		})
	}
}

// TestMutateIdempotent: a second pass over every mutated pod changes
// nothing and says so without a warning.
func TestMutateIdempotent(t *testing.T) {
	for _, mk := range []func() *corev1.Pod{kcmPod, operatorPod} {
		once, d := testConfig().Mutate(mk())
		if !d.Mutated {
			t.Fatalf("first pass: %+v", d)
		}
		twice, d2 := testConfig().Mutate(once.DeepCopy())
		if d2.Mutated || d2.Reason != ReasonAlreadyInjected || d2.Warning != "" {
			t.Fatalf("second pass: %+v", d2)
		}
		if !reflect.DeepEqual(once, twice) {
			t.Fatal("second pass changed the pod")
		}
	}
}

func TestShutdownGrace(t *testing.T) {
	tests := []struct {
		period *int64
		limit  time.Duration
		want   time.Duration
	}{
		{nil, 10 * time.Second, 10 * time.Second}, // default 30s: 15-5
		{ptr.To[int64](30), 30 * time.Second, 10 * time.Second},
		{ptr.To[int64](120), 10 * time.Second, 10 * time.Second},
		{ptr.To[int64](120), time.Minute, 55 * time.Second},
		{ptr.To[int64](11), time.Minute, 0}, // 5.5-5 truncates to 0
		{ptr.To[int64](13), time.Minute, time.Second},
		{ptr.To[int64](10), time.Minute, 0},
		{ptr.To[int64](0), time.Minute, 0},
	}
	for _, tt := range tests {
		p := kcmPod()
		p.Spec.TerminationGracePeriodSeconds = tt.period
		if got := ShutdownGrace(p, tt.limit); got != tt.want {
			t.Errorf("period %v limit %s: got %s, want %s", ptr.Deref(tt.period, -1), tt.limit, got, tt.want)
		}
	}
}

// TestSidecarIdentity: the sidecar runs as the client's effective uid and
// gid (container over pod), gid 0 when the client sets a uid only, as the
// runtime does; never as root; the configured defaults only when the
// client sets neither.
func TestSidecarIdentity(t *testing.T) {
	id := func(u, g *int64) *corev1.SecurityContext { return &corev1.SecurityContext{RunAsUser: u, RunAsGroup: g} }
	podID := func(u, g *int64) *corev1.PodSecurityContext {
		return &corev1.PodSecurityContext{RunAsUser: u, RunAsGroup: g}
	}
	n := ptr.To[int64]
	tests := []struct {
		name     string
		pod      *corev1.PodSecurityContext
		client   *corev1.SecurityContext
		uid, gid int64
	}{
		{"neither set: the defaults", nil, nil, 65532, 65532},
		{"kube-scheduler example: uid 65534, no group", nil, id(n(65534), nil), 65534, 0},
		{"pod uid only", podID(n(1000), nil), nil, 1000, 0},
		{"container uid and gid", nil, id(n(2000), n(3000)), 2000, 3000},
		{"container uid over pod uid, pod gid", podID(n(1000), n(2000)), id(n(3000), nil), 3000, 2000},
		{"container gid over pod gid", podID(n(1000), n(2000)), id(nil, n(4000)), 1000, 4000},
		{"root client: default uid, root's group", nil, id(n(0), nil), 65532, 0},
		{"container root over pod uid", podID(n(1000), nil), id(n(0), nil), 65532, 0},
		{"root client with a group", nil, id(n(0), n(5000)), 65532, 5000},
		{"group only", podID(nil, n(3000)), nil, 65532, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kcmPod()
			p.Spec.SecurityContext = tt.pod
			p.Spec.Containers[0].SecurityContext = tt.client
			out, d := testConfig().Mutate(p)
			if !d.Mutated {
				t.Fatalf("not mutated: %+v", d)
			}
			s := sidecarOf(t, out).SecurityContext
			if *s.RunAsUser != tt.uid || *s.RunAsGroup != tt.gid || !*s.RunAsNonRoot {
				t.Errorf("sidecar runs as %d:%d (runAsNonRoot %v), want %d:%d", *s.RunAsUser, *s.RunAsGroup, *s.RunAsNonRoot, tt.uid, tt.gid)
			}
		})
	}
}

// TestSidecarMounts: the sidecar gets the kubeconfig's volume and the
// volumes that may hold the files it names, not the client's own key
// material, node files or data.
func TestSidecarMounts(t *testing.T) {
	const (
		kubeconfigDir = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig"
		tokenDir      = "/var/run/secrets/gardener.cloud/shoot/token"
	)
	// gardenerPod is a Gardener-style client: its kubeconfig names a
	// tokenFile in a second, separately mounted Secret; it also has its
	// own serving key, a config file, node logs and data.
	gardenerPod := edited(operatorPod, func(p *corev1.Pod) {
		p.Spec.Containers[0] = corev1.Container{
			Name:  "gardener-resource-manager",
			Image: "example.com/grm:1",
			Args: []string{
				"--config=/etc/grm/config.yaml",
				"--tls-private-key-file", "/etc/grm/tls/tls.key",
			},
			Env: []corev1.EnvVar{{Name: "KUBECONFIG", Value: kubeconfigDir + "/kubeconfig"}},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "kubeconfig", MountPath: kubeconfigDir, ReadOnly: true},
				{Name: "token", MountPath: tokenDir, ReadOnly: true},
				{Name: "kube-api-access-abcde", MountPath: ServiceAccountDir, ReadOnly: true},
				{Name: "config", MountPath: "/etc/grm"},
				{Name: "tls", MountPath: "/etc/grm/tls"},
				{Name: "logs", MountPath: "/var/log"},
				{Name: "data", MountPath: "/data"},
			},
		}
		secret := func(name string) corev1.Volume {
			return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}
		}
		p.Spec.Volumes = []corev1.Volume{
			secret("kubeconfig"), secret("token"), secret("tls"),
			{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "grm"}}}},
			{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		}
	})
	tests := []struct {
		name   string
		pod    func() *corev1.Pod
		want   []string // mount paths, in the client's order
		reason Reason
		warn   string
	}{
		{
			name: "kube-controller-manager: the kubeconfig, not its pki",
			pod:  kcmPod,
			want: []string{"/etc/kubernetes/controller-manager.conf"},
		},
		{
			name: "Gardener-style: kubeconfig, token Secret and service account token",
			pod:  gardenerPod,
			want: []string{kubeconfigDir, tokenDir, ServiceAccountDir},
		},
		{
			name: "annotation adds a volume the client names",
			pod:  edited(kcmPod, func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationSidecarVolumes: " k8s-certs ,"} }),
			want: []string{"/etc/kubernetes/controller-manager.conf", "/etc/kubernetes/pki"},
		},
		{
			name: "in-cluster: the token and the annotation's volumes only",
			pod:  edited(operatorPod, func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationSidecarVolumes: "config"} }),
			want: []string{ServiceAccountDir, "/config"},
		},
		{
			name: "the kubeconfig mounted over a directory the client names",
			pod:  edited(gardenerPod, func(p *corev1.Pod) { p.Spec.Containers[0].Env[0].Value = "/etc/grm/tls/kubeconfig" }),
			// generic-kubeconfig is named by nothing now, and stays.
			want: []string{kubeconfigDir, tokenDir, ServiceAccountDir, "/etc/grm/tls"},
		},
		{
			name:   "annotation names a volume the client does not mount",
			pod:    edited(kcmPod, func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationSidecarVolumes: "nope"} }),
			reason: ReasonConflict, warn: `"nope"`,
		},
		{
			name:   "kubeconfig in the image",
			pod:    edited(kcmPod, func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[1:] }),
			reason: ReasonConflict, warn: "on no volume",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, d := testConfig().Mutate(tt.pod())
			if tt.reason != "" {
				if d.Mutated || d.Reason != tt.reason || !strings.Contains(d.Warning, tt.warn) {
					t.Fatalf("decision %+v, want %s with a warning containing %s", d, tt.reason, tt.warn)
				}
				return
			}
			if !d.Mutated {
				t.Fatalf("not mutated: %+v", d)
			}
			var got []string
			for _, m := range sidecarOf(t, out).VolumeMounts {
				if m.Name == VolumeName {
					continue
				}
				if !m.ReadOnly {
					t.Errorf("mount %s is writable", m.MountPath)
				}
				got = append(got, m.MountPath)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("sidecar mounts %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSkipUnreadableKubeconfig: when the spec shows that the sidecar's
// identity cannot read the kubeconfig (root-owned files only root can
// read, a root client), the pod stays as it is, with a warning, rather
// than getting a sidecar that never starts and keeps the client from
// starting.
func TestSkipUnreadableKubeconfig(t *testing.T) {
	mode := func(m int32) *int32 { return &m }
	root, nobody := ptr.To[int64](0), ptr.To[int64](65534)
	tests := []struct {
		name     string
		uid      *int64 // the client's runAsUser; nil: unset
		fsGroup  *int64 // the pod's; nil: unset
		mode     int32  // the kubeconfig Secret's defaultMode; 0: unset (0644)
		itemMode int32  // the mode of a kubeconfig item; 0: no items
		skip     bool
	}{
		{"root client, 0400", root, nil, 0o400, 0, true},
		{"client with no user, 0440: the sidecar's default group is not root's", nil, nil, 0o440, 0, true},
		{"root client, 0440: group 0 reads", root, nil, 0o440, 0, false},
		{"kube-scheduler example: uid 65534, 0440", nobody, nil, 0o440, 0, false},
		{"root client, 0400, fsGroup", root, ptr.To[int64](2000), 0o400, 0, false},
		{"root client, 0400 default, one item 0644", root, nil, 0o400, 0o644, false},
		{"default mode 0644", nil, nil, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kcmPod()
			if tt.fsGroup != nil {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: tt.fsGroup}
			}
			if tt.uid != nil {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: tt.uid}
			}
			if tt.mode != 0 {
				p.Spec.Volumes[0].Secret.DefaultMode = mode(tt.mode)
			}
			if tt.itemMode != 0 {
				p.Spec.Volumes[0].Secret.Items = []corev1.KeyToPath{{Key: "kubeconfig", Path: "kubeconfig", Mode: mode(tt.itemMode)}}
			}
			_, d := testConfig().Mutate(p)
			if tt.skip && (d.Mutated || d.Reason != ReasonConflict || !strings.Contains(d.Warning, "could not read the kubeconfig")) {
				t.Errorf("decision %+v; want skipped, with a warning that the sidecar could not read the kubeconfig", d)
			}
			if !tt.skip && !d.Mutated {
				t.Errorf("not injected: %+v", d)
			}
		})
	}
}
