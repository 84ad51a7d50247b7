package e2e_test

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// labelMakeHostNetwork marks the pods hostNetworkWebhook turns hostNetwork.
const labelMakeHostNetwork = "e2e.fanout.dev/make-host-network"

// hostNetworkWebhook serves, over TLS on ip, a mutating webhook that sets
// hostNetwork: true on pods labelled labelMakeHostNetwork: the "later
// webhook" that changes a pod after fanout-injector. It returns the
// webhook's URL and the PEM certificate of the CA to trust.
func hostNetworkWebhook(t *testing.T, ip net.IP) (string, []byte) {
	t.Helper()
	ca := testkit.NewCA(t)
	serving := ca.Serving(ip.String())
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{serving.TLS}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
				http.Error(w, "expected an AdmissionReview", http.StatusBadRequest)
				return
			}
			resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
			var pod corev1.Pod
			if json.Unmarshal(review.Request.Object.Raw, &pod) == nil && pod.Labels[labelMakeHostNetwork] == "true" && !pod.Spec.HostNetwork {
				pt := admissionv1.PatchTypeJSONPatch
				resp.Patch, resp.PatchType = []byte(`[{"op":"add","path":"/spec/hostNetwork","value":true}]`), &pt
			}
			review.Response, review.Request = resp, nil
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(review)
		}),
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String() + "/mutate", ca.CertPEM
}
