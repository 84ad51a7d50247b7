package webhook

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// checkPod is a structural subset of kube-apiserver's pod validation
// (k8s.io/kubernetes/pkg/apis/core/validation, which the main module must
// not import), covering every rule the mutation could break:
//   - at least one container; every container name (init and regular) a
//     unique DNS-1123 label;
//   - volume names unique DNS-1123 labels, each with exactly one source;
//   - every volume mount names an existing volume, at a non-empty path,
//     unique within its container;
//   - restartPolicy only on init containers and only Always; probes on
//     init containers only when they are sidecars (restartPolicy Always);
//   - ports in 1-65535, port names valid and unique per container;
//   - env names valid, with a value or a valueFrom, not both;
//   - requests at most limits;
//   - runAsNonRoot never with runAsUser 0; allowPrivilegeEscalation false
//     never with privileged;
//   - terminationGracePeriodSeconds not negative;
//   - labels and annotations valid (apimachinery's own validators).
//
// The e2e test checks the real thing: the real apiservers accept mutated
// pods.
func checkPod(p *corev1.Pod) error {
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabels(p.Labels, field.NewPath("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(p.Annotations, field.NewPath("metadata", "annotations"))...)
	spec := field.NewPath("spec")
	if len(p.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("containers"), ""))
	}
	if s := p.Spec.TerminationGracePeriodSeconds; s != nil && *s < 0 {
		errs = append(errs, field.Invalid(spec.Child("terminationGracePeriodSeconds"), *s, "negative"))
	}
	volumes := sets.New[string]()
	for i, v := range p.Spec.Volumes {
		fp := spec.Child("volumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(fp.Child("name"), v.Name, msg))
		}
		if volumes.Has(v.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), v.Name))
		}
		volumes.Insert(v.Name)
		if n := countSources(v.VolumeSource); n != 1 {
			errs = append(errs, field.Invalid(fp, v.Name, fmt.Sprintf("%d volume sources, want 1", n)))
		}
	}
	names := sets.New[string]()
	check := func(fp *field.Path, c *corev1.Container, init bool) {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(fp.Child("name"), c.Name, msg))
		}
		if names.Has(c.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), c.Name))
		}
		names.Insert(c.Name)
		sidecar := false
		if c.RestartPolicy != nil {
			if !init || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				errs = append(errs, field.Forbidden(fp.Child("restartPolicy"), "only Always, on init containers"))
			}
			sidecar = init
		}
		if init && !sidecar && (c.StartupProbe != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil) {
			errs = append(errs, field.Forbidden(fp, "probes on an init container that is not a sidecar"))
		}
		paths := sets.New[string]()
		for j, m := range c.VolumeMounts {
			mp := fp.Child("volumeMounts").Index(j)
			if !volumes.Has(m.Name) {
				errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
			}
			if m.MountPath == "" {
				errs = append(errs, field.Required(mp.Child("mountPath"), ""))
			}
			if paths.Has(m.MountPath) {
				errs = append(errs, field.Duplicate(mp.Child("mountPath"), m.MountPath))
			}
			paths.Insert(m.MountPath)
		}
		portNames := sets.New[string]()
		for j, pt := range c.Ports {
			pp := fp.Child("ports").Index(j)
			for _, msg := range validation.IsValidPortNum(int(pt.ContainerPort)) {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), pt.ContainerPort, msg))
			}
			if pt.Name != "" {
				for _, msg := range validation.IsValidPortName(pt.Name) {
					errs = append(errs, field.Invalid(pp.Child("name"), pt.Name, msg))
				}
				if portNames.Has(pt.Name) {
					errs = append(errs, field.Duplicate(pp.Child("name"), pt.Name))
				}
				portNames.Insert(pt.Name)
			}
		}
		for j, e := range c.Env {
			ep := fp.Child("env").Index(j)
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(ep.Child("name"), e.Name, msg))
			}
			if e.Value != "" && e.ValueFrom != nil {
				errs = append(errs, field.Invalid(ep, e.Name, "value and valueFrom"))
			}
		}
		for name, req := range c.Resources.Requests {
			if lim, ok := c.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
				errs = append(errs, field.Invalid(fp.Child("resources"), name, "request above limit"))
			}
		}
		if sc := c.SecurityContext; sc != nil {
			if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				errs = append(errs, field.Invalid(fp.Child("securityContext"), 0, "runAsNonRoot with runAsUser 0"))
			}
			if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && sc.Privileged != nil && *sc.Privileged {
				errs = append(errs, field.Invalid(fp.Child("securityContext"), "", "privileged without privilege escalation"))
			}
		}
	}
	for i := range p.Spec.InitContainers {
		check(spec.Child("initContainers").Index(i), &p.Spec.InitContainers[i], true)
	}
	for i := range p.Spec.Containers {
		check(spec.Child("containers").Index(i), &p.Spec.Containers[i], false)
	}
	return errs.ToAggregate()
}

func countSources(s corev1.VolumeSource) int {
	n := 0
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			n++
		}
	}
	return n
}

// TestCheckPodCatches: checkPod rejects what the mutation could get wrong,
// so FuzzMutate's oracle is not vacuous.
func TestCheckPodCatches(t *testing.T) {
	good, _ := testConfig().Mutate(kcmPod())
	if err := checkPod(good); err != nil {
		t.Fatalf("mutated pod rejected: %v", err)
	}
	breakers := map[string]func(p *corev1.Pod){
		"duplicate container": func(p *corev1.Pod) { p.Spec.Containers[0].Name = SidecarName },
		"missing volume":      func(p *corev1.Pod) { p.Spec.Volumes = p.Spec.Volumes[:len(p.Spec.Volumes)-1] },
		"duplicate mount":     func(p *corev1.Pod) { p.Spec.InitContainers[0].VolumeMounts[0].MountPath = MountPath },
		"probe on init":       func(p *corev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil },
		"root non-root":       func(p *corev1.Pod) { *p.Spec.InitContainers[0].SecurityContext.RunAsUser = 0 },
		"port":                func(p *corev1.Pod) { p.Spec.InitContainers[0].Ports[0].ContainerPort = 0 },
		"annotation":          func(p *corev1.Pod) { p.Annotations["bad key!"] = "" },
	}
	for name, br := range breakers {
		p := good.DeepCopy()
		br(p)
		if checkPod(p) == nil {
			t.Errorf("%s: not caught", name)
		}
	}
}

// FuzzMutate: any pod that passes checkPod gives a pod that passes it too
// (injected, or with the sidecar removed again); a second pass changes
// nothing; the admission JSONPatch turns the input into the output; a
// skipped pod comes back as it was.
func FuzzMutate(f *testing.F) {
	cfg := testConfig()
	for _, p := range []*corev1.Pod{kcmPod(), operatorPod()} {
		b, _ := json.Marshal(p)
		f.Add(b)
		// Injected, then made hostNetwork by a later webhook: the
		// removal path.
		out, _ := cfg.Mutate(p)
		out.Spec.HostNetwork = true
		b, _ = json.Marshal(out)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in corev1.Pod
		if err := json.Unmarshal(data, &in); err != nil || checkPod(&in) != nil {
			t.Skip()
		}
		for _, scope := range scopes {
			checkMutation(t, cfg, &in, scope)
		}
	})
}

// FuzzMutateArgs explores what JSON fuzzing rarely reaches: the client's
// arguments, KUBECONFIG, the annotations, a token mount, hostNetwork and the
// grace period, on the kube-controller-manager pod.
func FuzzMutateArgs(f *testing.F) {
	f.Add("--kubeconfig=/a", "--authentication-kubeconfig", "/a", "", "", "", false, false, int64(30))
	f.Add("-kubeconfig", "/a", "--authorization-kubeconfig=/a", "/b", "/a", "https://x:1", true, false, int64(0))
	f.Add("--v=2", "", "", "/b", "", "", true, false, int64(-1))
	cfg := testConfig()
	f.Fuzz(func(t *testing.T, a1, a2, a3, env, annKubeconfig, annEndpoints string, sa, hostNetwork bool, grace int64) {
		for _, s := range []string{a1, a2, a3, env, annKubeconfig, annEndpoints} {
			if !utf8.ValidString(s) {
				// Pods arrive as JSON: their strings are UTF-8.
				t.Skip()
			}
		}
		in := kcmPod()
		ct := &in.Spec.Containers[0]
		ct.Args = []string{a1, a2, a3}
		if env != "" {
			ct.Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: env}}
		}
		in.Annotations = map[string]string{}
		if annKubeconfig != "" {
			in.Annotations[AnnotationKubeconfig] = annKubeconfig
		}
		if annEndpoints != "" {
			in.Annotations[AnnotationEndpoints] = annEndpoints
		}
		if sa {
			ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x", MountPath: ServiceAccountDir})
			in.Spec.Volumes = append(in.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
		}
		in.Spec.HostNetwork = hostNetwork
		if grace >= 0 {
			in.Spec.TerminationGracePeriodSeconds = &grace
		}
		if checkPod(in) != nil {
			t.Skip()
		}
		for _, scope := range scopes[1:] {
			checkMutation(t, cfg, in, scope)
		}
		out := checkMutation(t, cfg, in, ScopePod)
		if out == nil {
			return
		}
		// No rewritten reference may still name the original file, and the
		// sidecar's shutdown grace fits the pod's.
		sc := out.Spec.InitContainers[len(out.Spec.InitContainers)-1]
		if orig, ok := strings.CutPrefix(sc.Args[0], "--kubeconfig="); ok {
			for _, c := range out.Spec.Containers {
				for _, list := range [][]string{c.Command, c.Args} {
					for _, fr := range flagRefs(list) {
						if fr.name == "kubeconfig" && fr.value(list) == orig {
							t.Fatalf("client %s still passes --kubeconfig=%s", c.Name, orig)
						}
					}
				}
			}
		}
		g := ShutdownGrace(out, cfg.MaxShutdownGrace)
		if p := out.Spec.TerminationGracePeriodSeconds; p != nil && g+5*time.Second > time.Duration(*p)*time.Second && g != 0 {
			t.Fatalf("shutdown grace %s does not fit a %ds termination grace period", g, *p)
		}
	})
}

var scopes = []Scope{ScopePod, ScopeNamespace, ScopeHosted}

// checkMutation checks MutateIn's invariants on in for scope and returns
// the mutated pod, or nil when in was skipped.
func checkMutation(t *testing.T, cfg Config, in *corev1.Pod, scope Scope) *corev1.Pod {
	t.Helper()
	snapshot := in.DeepCopy()
	out, ops, d := cfg.plan(in, scope)
	if !reflect.DeepEqual(in, snapshot) {
		t.Fatal("Mutate modified its input")
	}
	if !d.Mutated && !d.Removed {
		if out != in || d.Reason == "" || ops != nil {
			t.Fatalf("skipped pod returned changed, or without reason: %+v", d)
		}
		return nil
	}
	if err := checkPod(out); err != nil {
		t.Fatalf("mutated pod is invalid: %v", err)
	}
	again, d2 := cfg.MutateIn(out.DeepCopy(), scope)
	if d2.Mutated || d2.Removed || !reflect.DeepEqual(again, out) {
		t.Fatalf("second pass changed the pod: %+v", d2)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(in)
	patched, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, patch)
	}
	// Compared as JSON, which is what the apiserver gets: an empty slice
	// and a nil one are the same there.
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(&got)
	wantJSON, _ := json.Marshal(out)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("patched pod differs from Mutate's output\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if d.Removed {
		if slices.ContainsFunc(out.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarName }) {
			t.Fatal("the sidecar is still there after its removal")
		}
		if _, ok := out.Labels[LabelSidecar]; ok {
			t.Fatalf("label %s is still there after the sidecar's removal", LabelSidecar)
		}
		return nil
	}
	sc := out.Spec.InitContainers[len(out.Spec.InitContainers)-1]
	if sc.Name != SidecarName || (sc.Args[0] != "--in-cluster" && !path.IsAbs(sc.Args[0][len("--kubeconfig="):])) {
		t.Fatalf("sidecar %+v", sc)
	}
	saMount := slices.ContainsFunc(sc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == ServiceAccountDir })
	if d.InCluster && !saMount {
		t.Fatalf("in-cluster sidecar without the service account mount: %+v", sc.VolumeMounts)
	}
	if slices.Contains(sc.Args, "--discovery-kubeconfig="+DiscoveryInCluster) && !saMount {
		t.Fatalf("sidecar discovering as the pod's service account without its token: %+v", sc.VolumeMounts)
	}
	for i, c := range out.Spec.Containers {
		if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == DiscoveryVolumeName }) {
			t.Fatalf("client container %d mounts the sidecar's discovery token", i)
		}
	}
	return out
}
