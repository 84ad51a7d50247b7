package webhook

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func review(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return rawReview(t, pod.Namespace, raw)
}

func newTestHandler(t *testing.T) (*Handler, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return NewHandler(testConfig(), m, slog.New(slog.DiscardHandler), DefaultLimits()), m
}

func post(t *testing.T, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response is not an AdmissionReview v1: %s", rec.Body)
	}
	if out.Response.UID != "uid-1" || !out.Response.Allowed {
		t.Fatalf("response %+v: want uid-1, allowed", out.Response)
	}
	return out.Response
}

// applyPatch applies resp's JSONPatch to pod as kube-apiserver would.
func applyPatch(t *testing.T, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	raw, _ := json.Marshal(pod)
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decoding patch %s: %v", resp.Patch, err)
	}
	patched, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying patch %s: %v", resp.Patch, err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(patched, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestHandlerPatchMatchesMutate: the JSONPatch, applied to the pod, gives
// exactly what Mutate gives, for pods with and without annotations, init
// containers and volumes.
func TestHandlerPatchMatchesMutate(t *testing.T) {
	h, m := newTestHandler(t)
	bare := operatorPod()
	bare.Spec.Volumes = nil
	bare.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "t", MountPath: ServiceAccountDir}}
	withInit := kcmPod()
	withInit.Annotations = map[string]string{"a": "b"}
	withInit.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	for i, pod := range []*corev1.Pod{kcmPod(), operatorPod(), bare, withInit} {
		resp := post(t, h, review(t, pod))
		if len(resp.Warnings) != 0 {
			t.Errorf("pod %d: warnings %v", i, resp.Warnings)
		}
		got := applyPatch(t, pod, resp)
		want, _ := testConfig().Mutate(pod)
		if !reflect.DeepEqual(got, want) {
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			t.Errorf("pod %d: patched pod differs from Mutate's\n got %s\nwant %s", i, gj, wj)
		}
		// Re-invocation: allowed, no patch.
		if resp := post(t, h, review(t, got)); resp.Patch != nil || len(resp.Warnings) != 0 {
			t.Errorf("pod %d: re-invocation patched %s warned %v", i, resp.Patch, resp.Warnings)
		}
	}
	if got := testutil.ToFloat64(m.Mutations); got != 4 {
		t.Errorf("mutations %v, want 4", got)
	}
	if got := testutil.ToFloat64(m.Skipped.WithLabelValues(string(ReasonAlreadyInjected))); got != 4 {
		t.Errorf("already-injected %v, want 4", got)
	}
}

// TestHandlerSkipWarns: an unhandleable pod is allowed unpatched, with a
// warning and a count by reason.
func TestHandlerSkipWarns(t *testing.T) {
	h, m := newTestHandler(t)
	pod := kcmPod()
	pod.Spec.HostNetwork = true
	resp := post(t, h, review(t, pod))
	if resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "hostNetwork") {
		t.Fatalf("response %+v", resp)
	}
	if got := testutil.ToFloat64(m.Skipped.WithLabelValues(string(ReasonHostNetwork))); got != 1 {
		t.Errorf("skipped{host-network} = %v", got)
	}
	if got := testutil.ToFloat64(m.Mutations); got != 0 {
		t.Errorf("mutations = %v", got)
	}
	// Undecodable object: allowed, warned, counted as invalid.
	var rv admissionv1.AdmissionReview
	_ = json.Unmarshal(review(t, kcmPod()), &rv)
	rv.Request.Object.Raw = []byte(`{"metadata":{"labels":{"fanout.dev/inject":"true"}},"spec":{"containers":"nope"}}`)
	b, _ := json.Marshal(rv)
	if resp := post(t, h, b); resp.Patch != nil || len(resp.Warnings) != 1 {
		t.Fatalf("invalid pod: %+v", resp)
	}
	if got := testutil.ToFloat64(m.Skipped.WithLabelValues(string(ReasonInvalid))); got != 1 {
		t.Errorf("skipped{invalid} = %v", got)
	}
	// Not a pod CREATE: untouched and uncounted.
	rv.Request.Operation = admissionv1.Update
	b, _ = json.Marshal(rv)
	if resp := post(t, h, b); resp.Patch != nil || len(resp.Warnings) != 0 {
		t.Fatalf("update: %+v", resp)
	}
}

func TestHandlerBadRequests(t *testing.T) {
	h, _ := newTestHandler(t)
	for _, tt := range []struct {
		method, body string
		code         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, "not json", http.StatusBadRequest},
		{http.MethodPost, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, "/mutate", strings.NewReader(tt.body)))
		if rec.Code != tt.code {
			t.Errorf("%s %q: %d, want %d", tt.method, tt.body, rec.Code, tt.code)
		}
	}
}

type staticCert struct{ c *tls.Certificate }

func (s staticCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.c, nil }

// TestModuleServesTLS runs the fx module and sends a review over real TLS,
// with the certificate from the CertificateSource.
func TestModuleServesTLS(t *testing.T) {
	ca := testkit.NewCA(t)
	kp := ca.Serving("127.0.0.1")
	var srv *Server
	app := fxtest.New(t,
		fx.Supply(
			testConfig(),
			ServerConfig{ListenAddress: "127.0.0.1:0"},
			DefaultLimits(),
			slog.New(slog.DiscardHandler),
			fx.Annotate(staticCert{&kp.TLS}, fx.As(new(CertificateSource))),
			fx.Annotate(prometheus.NewRegistry(), fx.As(new(prometheus.Registerer))),
		),
		Module,
		fx.Populate(&srv),
	)
	app.RequireStart()
	defer app.RequireStop()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Post("https://"+srv.Addr().String()+"/mutate", "application/json", bytes.NewReader(review(t, kcmPod())))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil || out.Response.Patch == nil {
		t.Fatalf("response %s (%v)", body, err)
	}
	hz, err := client.Get("https://" + srv.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hz.Body.Close()
	if hz.StatusCode != http.StatusOK {
		t.Fatalf("/healthz %d", hz.StatusCode)
	}
}

// rawReview wraps a pod of namespace given as raw JSON, so that it can
// carry fields the k8s.io/api types do not know.
func rawReview(t *testing.T, namespace string, raw []byte) []byte {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("uid-1"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: namespace,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pointer resolves an RFC 6901 JSON pointer in a decoded document.
func pointer(doc any, p string) (any, bool) {
	for _, tok := range strings.Split(p, "/")[1:] {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch v := doc.(type) {
		case map[string]any:
			var ok bool
			if doc, ok = v[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// TestHandlerKeepsUnknownFields: a pod carrying fields this build's
// k8s.io/api types do not know, at pod, container, init container, mount,
// env and volume level, and a volume of an unknown source type, comes out
// of the admission patch with all of them as they were.
func TestHandlerKeepsUnknownFields(t *testing.T) {
	const raw = `{
	  "apiVersion": "v1", "kind": "Pod",
	  "metadata": {"name": "kcm", "namespace": "kube-system", "labels": {"fanout.dev/inject": "true"}},
	  "spec": {
	    "futurePodField": {"mode": "strict"},
	    "initContainers": [{"name": "setup", "image": "busybox", "futureInitField": 7}],
	    "containers": [
	      {
	        "name": "kube-controller-manager", "image": "kcm",
	        "command": ["kube-controller-manager", "--service-account-private-key-file=/etc/kubernetes/pki/sa.key"],
	        "args": ["--kubeconfig=/etc/kubernetes/kcm/kubeconfig", "--leader-elect=true"],
	        "env": [{"name": "GOMAXPROCS", "value": "2", "futureEnvField": "x"}],
	        "futureContainerField": {"enabled": true},
	        "volumeMounts": [
	          {"name": "kubeconfig", "mountPath": "/etc/kubernetes/kcm", "readOnly": true, "futureMountField": "y"},
	          {"name": "pki", "mountPath": "/etc/kubernetes/pki", "readOnly": true},
	          {"name": "cache", "mountPath": "/cache"}
	        ]
	      },
	      {"name": "other", "image": "other", "futureContainerField": "z"}
	    ],
	    "volumes": [
	      {"name": "kubeconfig", "secret": {"secretName": "kcm-kubeconfig", "futureSecretField": 1}},
	      {"name": "pki", "secret": {"secretName": "kcm-pki"}},
	      {"name": "cache", "futureSource": {"driver": "new.example.com", "size": "1Gi"}}
	    ]
	  }
	}`
	unknown := []string{
		"/spec/futurePodField",
		"/spec/initContainers/0/futureInitField",
		"/spec/containers/0/futureContainerField",
		"/spec/containers/0/env/0/futureEnvField",
		"/spec/containers/0/volumeMounts/0/futureMountField",
		"/spec/containers/1/futureContainerField",
		"/spec/volumes/0/secret/futureSecretField",
		"/spec/volumes/2/futureSource",
	}
	h, _ := newTestHandler(t)
	resp := post(t, h, rawReview(t, "kube-system", []byte(raw)))
	if len(resp.Warnings) != 0 || resp.Patch == nil {
		t.Fatalf("not injected: warnings %v", resp.Warnings)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decoding patch %s: %v", resp.Patch, err)
	}
	patched, err := p.Apply([]byte(raw))
	if err != nil {
		t.Fatalf("applying patch %s: %v", resp.Patch, err)
	}
	var before, after any
	_ = json.Unmarshal([]byte(raw), &before)
	if err := json.Unmarshal(patched, &after); err != nil {
		t.Fatal(err)
	}
	for _, ptr := range unknown {
		want, _ := pointer(before, ptr)
		got, ok := pointer(after, ptr)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v after the patch, want %v (patch %s)", ptr, got, want, resp.Patch)
		}
	}
	// And the patch did what Mutate does.
	var in corev1.Pod
	_ = json.Unmarshal([]byte(raw), &in)
	want, _ := testConfig().Mutate(&in)
	var got corev1.Pod
	_ = json.Unmarshal(patched, &got)
	gj, _ := json.Marshal(&got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("patched pod differs from Mutate's\n got %s\nwant %s", gj, wj)
	}
}

// TestHandlerRemovesSidecarOnHostNetwork: a webhook after the injector
// makes an injected pod hostNetwork; on re-invocation the injector takes
// the sidecar out again and gives the client its kubeconfig back, so the
// pod ends as a hostNetwork pod always does: without fanout.
func TestHandlerRemovesSidecarOnHostNetwork(t *testing.T) {
	kcmWithEnv := func() *corev1.Pod {
		p := kcmPod()
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBECONFIG", Value: "/etc/kubernetes/controller-manager.conf"}, {Name: "A", Value: "$(KUBECONFIG)"}}
		return p
	}
	h, m := newTestHandler(t)
	for i, mk := range []func() *corev1.Pod{kcmPod, kcmWithEnv, operatorPod} {
		pod := mk()
		injected := applyPatch(t, pod, post(t, h, review(t, pod)))
		if _, ok := injected.Annotations[AnnotationInjected]; !ok {
			t.Fatalf("pod %d: not injected", i)
		}
		// The later webhook, and kube-apiserver's defaulting after it:
		// a hostNetwork pod's container ports are host ports.
		injected.Spec.HostNetwork = true
		for j := range injected.Spec.InitContainers {
			for k := range injected.Spec.InitContainers[j].Ports {
				pt := &injected.Spec.InitContainers[j].Ports[k]
				pt.HostPort = pt.ContainerPort
			}
		}
		resp := post(t, h, review(t, injected))
		if resp.Patch == nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "removed") || !strings.Contains(resp.Warnings[0], "hostNetwork") {
			t.Fatalf("pod %d: re-invocation on a hostNetwork pod: patch %s, warnings %v; want the sidecar removed with a warning", i, resp.Patch, resp.Warnings)
		}
		got := applyPatch(t, injected, resp)
		want := mk()
		want.Spec.HostNetwork = true
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("pod %d: after removal\n got %s\nwant %s", i, gj, wj)
		}
		// A further pass leaves it: a hostNetwork pod is not injected.
		if resp := post(t, h, review(t, got)); resp.Patch != nil {
			t.Errorf("pod %d: third pass patched %s", i, resp.Patch)
		}
	}
	if got := testutil.ToFloat64(m.Skipped.WithLabelValues(string(ReasonHostNetwork))); got != 6 {
		t.Errorf("skipped{host-network} = %v, want 6 (3 removals, 3 skips)", got)
	}
	if got := testutil.ToFloat64(m.Mutations); got != 3 {
		t.Errorf("mutations = %v, want 3", got)
	}
}
