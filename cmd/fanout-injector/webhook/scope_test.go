package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// gardenerKCMPod is a hosted control plane's kube-controller-manager as
// Gardener runs it in a seed's shoot namespace: no fanout label, no
// service account token, a generic-token-kubeconfig (kubeconfig and token
// in one projected volume) naming https://kube-apiserver, and its own key
// material on the command line.
func gardenerKCMPod() *corev1.Pod {
	const kc = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "kube-controller-manager-", Namespace: "shoot--p--c",
			Labels: map[string]string{"app": "kubernetes", "role": "controller-manager",
				"networking.resources.gardener.cloud/to-kube-apiserver-tcp-443": "allowed"},
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:    "kube-controller-manager",
				Image:   "registry.k8s.io/kube-controller-manager:v1.37.2",
				Command: []string{"/usr/local/bin/kube-controller-manager"},
				Args: []string{
					"--kubeconfig=" + kc + "/kubeconfig",
					"--authentication-kubeconfig=" + kc + "/kubeconfig",
					"--authorization-kubeconfig=" + kc + "/kubeconfig",
					"--service-account-private-key-file=/srv/kubernetes/service-account-key/id_rsa",
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "kubeconfig", MountPath: kc, ReadOnly: true},
					{Name: "service-account-key", MountPath: "/srv/kubernetes/service-account-key"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					DefaultMode: ptr.To[int32](420), // 0644, as Gardener writes it
					Sources: []corev1.VolumeProjection{
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "generic-token-kubeconfig"},
							Items: []corev1.KeyToPath{{Key: "kubeconfig", Path: "kubeconfig"}}}},
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "shoot-access-kube-controller-manager"},
							Items: []corev1.KeyToPath{{Key: "token", Path: "token"}}}},
					},
				}}},
				{Name: "service-account-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "service-account-key"}}},
			},
		},
	}
}

// etcdPod and apiserverPod are the other pods of a hosted control plane's
// namespace: not clients.
func etcdPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-main-0", Namespace: "shoot--p--c"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "etcd", Image: "etcd", Args: []string{"--data-dir=/var/etcd/data"},
			VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x", MountPath: ServiceAccountDir, ReadOnly: true}},
		}}, Volumes: []corev1.Volume{{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}},
	}
}

func apiserverPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-x", Namespace: "shoot--p--c"},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{
			Name: "kube-apiserver", Image: "kube-apiserver",
			Command: []string{"/usr/local/bin/kube-apiserver", "--etcd-servers=https://etcd-main-client:2379", "--egress-selector-config-file=/etc/egress/config.yaml"},
		}}},
	}
}

// TestHostedScope: in a namespace labelled fanout.dev/inject=hosted, an
// unlabelled Gardener kube-controller-manager gets a sidecar that finds
// the replicas of the Service its kubeconfig names, in the hosting
// cluster, with a token of the pod's own service account that only the
// sidecar mounts; the client gets nothing new but the localhost
// kubeconfig.
func TestHostedScope(t *testing.T) {
	cfg := testConfig()
	in := gardenerKCMPod()
	out := checkMutation(t, cfg, in, ScopeHosted)
	if out == nil {
		_, d := cfg.MutateIn(in, ScopeHosted)
		t.Fatalf("not injected: %+v", d)
	}
	sc := sidecarOf(t, out)
	for _, want := range []string{"--endpoints=" + HostedEndpoints, "--discovery-kubeconfig=in-cluster",
		"--kubeconfig=/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/kubeconfig"} {
		if !slices.Contains(sc.Args, want) {
			t.Errorf("sidecar args %q lack %q", sc.Args, want)
		}
	}
	if i := slices.IndexFunc(sc.Env, func(e corev1.EnvVar) bool { return e.Name == PodNamespaceEnv }); i < 0 ||
		sc.Env[i].ValueFrom == nil || sc.Env[i].ValueFrom.FieldRef == nil || sc.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("sidecar env %+v lacks %s from metadata.namespace", sc.Env, PodNamespaceEnv)
	}
	var mounts []string
	for _, m := range sc.VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	if want := []string{"kubeconfig:/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig", DiscoveryVolumeName + ":" + ServiceAccountDir, VolumeName + ":" + MountPath}; !slices.Equal(mounts, want) {
		t.Errorf("sidecar mounts %q, want %q (the client's key material stays out)", mounts, want)
	}
	vi := slices.IndexFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == DiscoveryVolumeName })
	if vi < 0 || out.Spec.Volumes[vi].Projected == nil {
		t.Fatalf("no projected volume %s: %+v", DiscoveryVolumeName, out.Spec.Volumes)
	}
	src := out.Spec.Volumes[vi].Projected.Sources
	if len(src) != 3 || src[0].ServiceAccountToken == nil || *src[0].ServiceAccountToken.ExpirationSeconds != DiscoveryTokenSeconds ||
		src[0].ServiceAccountToken.Path != "token" || src[1].ConfigMap == nil || src[1].ConfigMap.Name != "kube-root-ca.crt" {
		t.Errorf("discovery volume sources %+v", src)
	}
	client := out.Spec.Containers[0]
	if slices.ContainsFunc(client.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == DiscoveryVolumeName }) {
		t.Error("the client mounts the sidecar's discovery token")
	}
	if !slices.Contains(client.Args, "--kubeconfig="+KubeconfigPath) || !slices.Contains(client.Args, "--authorization-kubeconfig="+KubeconfigPath) {
		t.Errorf("client args %q not pointed at fanout", client.Args)
	}
	if out.Labels["networking.gardener.cloud/to-runtime-apiserver"] != "allowed" {
		t.Errorf("labels %v lack Gardener's to-runtime-apiserver", out.Labels)
	}
	if out.Spec.AutomountServiceAccountToken == nil || *out.Spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken changed")
	}

	// The same pod with a namespace labelled enabled: fanout's defaults,
	// no token, no label but the sidecar's own.
	out = checkMutation(t, cfg, gardenerKCMPod(), ScopeNamespace)
	if out == nil {
		t.Fatal("not injected in ScopeNamespace")
	}
	sc = sidecarOf(t, out)
	if !slices.Contains(sc.Args, "--endpoints="+cfg.Endpoints) || slices.ContainsFunc(sc.Args, func(a string) bool { return strings.HasPrefix(a, "--discovery-kubeconfig") }) {
		t.Errorf("ScopeNamespace sidecar args %q", sc.Args)
	}
	if slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == DiscoveryVolumeName }) || len(out.Labels) != len(gardenerKCMPod().Labels)+1 {
		t.Errorf("ScopeNamespace added the hosted token or labels: %v", out.Labels)
	}

	// Labelled with the pod label only: not in a namespace that opted in.
	if _, d := cfg.MutateIn(gardenerKCMPod(), ScopePod); d.Mutated || d.Reason != ReasonNotLabelled {
		t.Errorf("ScopePod without the pod label: %+v", d)
	}
}

// TestNamespaceScopesLeaveOthers: what a namespace that opted in holds
// besides its clients is admitted as it is, without a warning; a pod
// labelled fanout.dev/inject=false stays out; an in-cluster client is
// injected only with the pod label.
func TestNamespaceScopesLeaveOthers(t *testing.T) {
	cfg := testConfig()
	optedOut := gardenerKCMPod()
	optedOut.Labels[LabelInject] = LabelOptOut
	unlabelledOperator := operatorPod()
	delete(unlabelledOperator.Labels, LabelInject)
	for _, scope := range []Scope{ScopeNamespace, ScopeHosted} {
		for _, tt := range []struct {
			name   string
			pod    *corev1.Pod
			reason Reason
		}{
			{"etcd", etcdPod(), ReasonNotAClient},
			{"kube-apiserver", apiserverPod(), ReasonNotAClient},
			{"in-cluster without the pod label", unlabelledOperator, ReasonNotAClient},
			{"opted out", optedOut, ReasonOptedOut},
		} {
			out, d := cfg.MutateIn(tt.pod, scope)
			if d.Mutated || d.Reason != tt.reason || d.Warning != "" || out != tt.pod {
				t.Errorf("%s, %s: %+v, want left alone for %s without a warning", scope, tt.name, d, tt.reason)
			}
		}
		out := checkMutation(t, cfg, operatorPod(), scope)
		if out == nil || !slices.Contains(sidecarOf(t, out).Args, "--in-cluster") {
			t.Errorf("%s: the labelled in-cluster client was not injected", scope)
		}
		// A client it cannot handle is admitted with a warning.
		bad := gardenerKCMPod()
		bad.Spec.HostNetwork = true
		if _, d := cfg.MutateIn(bad, scope); d.Mutated || d.Reason != ReasonHostNetwork || d.Warning == "" {
			t.Errorf("%s: hostNetwork client %+v, want a warning", scope, d)
		}
	}
}

// TestPodAnnotations: the per-pod settings of docs/injector.md, and the
// warning for each malformed one.
func TestPodAnnotations(t *testing.T) {
	cfg := testConfig()
	p := gardenerKCMPod()
	p.Annotations = map[string]string{
		AnnotationEndpoints:           "endpointslice:///garden/virtual-garden-kube-apiserver",
		AnnotationDiscoveryKubeconfig: "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/runtime",
		AnnotationTLSServerName:       "virtual-garden-kube-apiserver",
		AnnotationCPURequest:          "50m",
		AnnotationMemoryLimit:         "",
		AnnotationMemoryRequest:       "64Mi",
	}
	out := checkMutation(t, cfg, p, ScopeHosted)
	if out == nil {
		t.Fatal("not injected")
	}
	sc := sidecarOf(t, out)
	for _, want := range []string{"--endpoints=endpointslice:///garden/virtual-garden-kube-apiserver",
		"--discovery-kubeconfig=/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/runtime", "--tls-server-name=virtual-garden-kube-apiserver"} {
		if !slices.Contains(sc.Args, want) {
			t.Errorf("sidecar args %q lack %q", sc.Args, want)
		}
	}
	if slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == DiscoveryVolumeName }) {
		t.Error("a discovery kubeconfig file still got the projected token")
	}
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{},
	}
	if sc.Resources.Requests.Cpu().Cmp(want.Requests[corev1.ResourceCPU]) != 0 || sc.Resources.Requests.Memory().Cmp(want.Requests[corev1.ResourceMemory]) != 0 || len(sc.Resources.Limits) != 0 {
		t.Errorf("sidecar resources %+v, want %+v", sc.Resources, want)
	}
	// Static endpoints by annotation: the hosted discovery default goes.
	p = gardenerKCMPod()
	p.Annotations = map[string]string{AnnotationEndpoints: "https://10.0.0.1:443,https://10.0.0.2:443"}
	out = checkMutation(t, cfg, p, ScopeHosted)
	if out == nil || slices.ContainsFunc(sidecarOf(t, out).Args, func(a string) bool { return strings.HasPrefix(a, "--discovery-kubeconfig") }) ||
		slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == DiscoveryVolumeName }) {
		t.Errorf("static endpoints by annotation kept the hosted discovery")
	}

	for key, v := range map[string]string{
		AnnotationDiscoveryKubeconfig: "relative/kubeconfig",
		AnnotationTLSServerName:       "not a name",
		AnnotationCPURequest:          "lots",
		AnnotationMemoryLimit:         "16Mi", // below the injector's 32Mi request
	} {
		p := gardenerKCMPod()
		p.Annotations = map[string]string{key: v}
		_, d := cfg.MutateIn(p, ScopeHosted)
		if d.Mutated || d.Reason != ReasonConflict || !strings.Contains(d.Warning, "fanout.dev/") {
			t.Errorf("annotation %s=%q: %+v, want a conflict naming the annotation", key, v, d)
		}
	}
	p = gardenerKCMPod()
	p.Annotations = map[string]string{AnnotationEndpoints: "https://10.0.0.1:443", AnnotationDiscoveryKubeconfig: "in-cluster"}
	if _, d := cfg.MutateIn(p, ScopeHosted); d.Reason != ReasonConflict {
		t.Errorf("discovery credentials without endpointslice endpoints: %+v", d)
	}
}

// TestHandlerScopes: the webhook path says the scope; an unknown one is
// refused.
func TestHandlerScopes(t *testing.T) {
	h, m := newTestHandler(t)
	body := review(t, gardenerKCMPod())
	for _, tt := range []struct {
		path    string
		mutated bool
	}{{"/mutate", false}, {"/mutate/namespace", true}, {"/mutate/hosted", true}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tt.path, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.path, rec.Code, rec.Body)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("%s: %v: %s", tt.path, err, rec.Body)
		}
		if hasPatch := out.Response.Patch != nil; hasPatch != tt.mutated {
			t.Errorf("%s: patched %v, want %v: %s", tt.path, hasPatch, tt.mutated, rec.Body)
		}
		if hosted := bytes.Contains(out.Response.Patch, []byte(DiscoveryVolumeName)); hosted != (tt.path == "/mutate/hosted") {
			t.Errorf("%s: hosted discovery %v", tt.path, hosted)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate/other", bytes.NewReader(body)))
	if rec.Code != http.StatusNotFound {
		t.Errorf("/mutate/other: %d, want 404", rec.Code)
	}
	if got := testutil.ToFloat64(m.Skipped.WithLabelValues(string(ReasonNotLabelled))); got != 1 {
		t.Errorf("skipped{not-labelled} = %v, want 1", got)
	}
}
