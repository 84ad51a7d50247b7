package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// labelMakeHostNetwork marks the pods hostNetworkWebhook turns hostNetwork.
const labelMakeHostNetwork = "e2e.fanout.dev/make-host-network"

// hostNetworkWebhook serves, over TLS on ip, a mutating webhook that sets
// hostNetwork: true on pods labelled labelMakeHostNetwork: the "later
// webhook" that changes a pod after fanout-injector. It returns the
// webhook's URL and the PEM certificate to trust.
func hostNetworkWebhook(t *testing.T, ip net.IP) (string, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e-host-network-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{ip}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
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
	return "https://" + ln.Addr().String() + "/mutate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
