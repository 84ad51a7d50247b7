package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var podKind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}

// countValues is scanShape's oracle: the values of a JSON document, by
// encoding/json's tokenizer. Keys are strings too there; in an object
// every other token is one.
func countValues(b []byte) (int, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	type frame struct{ object, wantKey bool }
	var stack []frame
	n := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.object && tok != json.Delim('}') {
				top.wantKey = !top.wantKey
				if !top.wantKey {
					continue // that was a key; the value follows
				}
			}
		}
		switch tok {
		case json.Delim('{'):
			n++
			stack = append(stack, frame{object: true, wantKey: true})
		case json.Delim('['):
			n++
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			n++
		}
	}
}

// FuzzScanShape holds scanShape to encoding/json: on every valid JSON
// document it counts the values exactly, and never fewer containers or
// volumes than the review decodes to; an invalid one never makes it
// panic.
func FuzzScanShape(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `"x"`, `1`, `[1,"a",{"b":[true,false,null]}]`, ` { "a" : [ ] , "b" : { } } `,
		`{"request":{"object":{"spec":{"containers":[{},{}],"initContainers":[{}],"volumes":[{"name":"v"}]}}}}`,
		`{"REQUEST":{"object":{"\u0073pec":{"ephemeralContainers":[null,{}]}}}}`,
		`{"request":{"object":{"spec":{"containers":[{"args":["\"]"]}]}}}}`,
		`[{"a":"\\"},1e5,-0.5]`, `{"a":}`, `[1,]`, `{"a" "b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := scanShape(b, 1<<30)
		if !json.Valid(b) {
			return
		}
		if err != nil {
			t.Fatalf("scanShape rejected valid JSON: %v", err)
		}
		want, err := countValues(b)
		if err != nil {
			t.Fatal(err)
		}
		if s.values != want {
			t.Fatalf("%d values, encoding/json counts %d", s.values, want)
		}
		var rv admissionv1.AdmissionReview
		if json.Unmarshal(b, &rv) != nil || rv.Request == nil {
			return
		}
		var pod corev1.Pod
		if json.Unmarshal(rv.Request.Object.Raw, &pod) != nil {
			return
		}
		sp := pod.Spec
		if c := len(sp.Containers) + len(sp.InitContainers) + len(sp.EphemeralContainers); s.containers < c {
			t.Fatalf("%d containers counted, %d decoded", s.containers, c)
		}
		if s.volumes < len(sp.Volumes) {
			t.Fatalf("%d volumes counted, %d decoded", s.volumes, len(sp.Volumes))
		}
	})
}

// FuzzHandler feeds any body to the admission handler on each webhook
// path. It never panics; it answers 200 with a well-formed AdmissionReview
// that allows the pod and carries the request's uid, or a 4xx; and a
// patch, when there is one, applies to the request's pod and gives a pod
// that decodes and that a second review leaves as it is.
func FuzzHandler(f *testing.F) {
	cfg := testConfig()
	for _, p := range []*corev1.Pod{kcmPod(), operatorPod()} {
		raw, _ := json.Marshal(p)
		f.Add(uint8(0), reviewOf(raw))
		f.Add(uint8(1), reviewOf(raw))
		out, _ := cfg.Mutate(p)
		out.Spec.HostNetwork = true
		raw, _ = json.Marshal(out)
		f.Add(uint8(2), reviewOf(raw))
	}
	f.Add(uint8(0), reviewOf([]byte(`{"metadata":{"labels":{"fanout.dev/inject":"true"}},"spec":{"containers":[{},{},{}]}}`)))
	f.Add(uint8(1), []byte(`{"request":{"uid":"u"}}`))
	f.Add(uint8(3), []byte(`not json`))
	paths := []string{"/mutate", "/mutate/namespace", "/mutate/hosted", "/other"}
	f.Fuzz(func(t *testing.T, path uint8, body []byte) {
		h, _ := newTestHandler(t)
		url := paths[int(path)%len(paths)]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			if rec.Code < 400 || rec.Code > 499 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			return
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || !out.Response.Allowed {
			t.Fatalf("not an AdmissionReview allowing the pod: %s (%v)", rec.Body, err)
		}
		var in struct {
			Request *struct {
				UID    string               `json:"uid"`
				Object runtime.RawExtension `json:"object"`
			} `json:"request"`
		}
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			t.Fatalf("answered 200 to a body that is no review (%v)", err)
		}
		if string(out.Response.UID) != in.Request.UID {
			t.Fatalf("uid %q, the request's is %q", out.Response.UID, in.Request.UID)
		}
		if out.Response.Patch == nil {
			return
		}
		p, err := jsonpatch.DecodePatch(out.Response.Patch)
		if err != nil {
			t.Fatalf("patch %s: %v", out.Response.Patch, err)
		}
		patched, err := p.Apply(in.Request.Object.Raw)
		if err != nil {
			t.Fatalf("patch %s does not apply to the pod: %v", out.Response.Patch, err)
		}
		var pod corev1.Pod
		if err := json.Unmarshal(patched, &pod); err != nil {
			t.Fatalf("patched pod does not decode: %v", err)
		}
		var rv admissionv1.AdmissionReview
		_ = json.Unmarshal(body, &rv)
		rv.Request.Object.Raw = patched
		again, _ := json.Marshal(rv)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, url, bytes.NewReader(again)))
		var out2 admissionv1.AdmissionReview
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out2) != nil || out2.Response == nil {
			t.Fatalf("second review: %d %s", rec.Code, rec.Body)
		}
		if out2.Response.Patch != nil {
			t.Fatalf("second review patched again: %s", out2.Response.Patch)
		}
	})
}

// reviewOf wraps a raw pod in a pod CREATE review.
func reviewOf(raw []byte) []byte {
	b, _ := json.Marshal(admissionv1.AdmissionReview{
		Request: &admissionv1.AdmissionRequest{
			UID: "uid-1", Kind: podKind, Operation: admissionv1.Create, Namespace: "kube-system",
			Object: runtime.RawExtension{Raw: raw},
		},
	})
	return b
}
