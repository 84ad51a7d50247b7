package certs

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestLocalCA serves with a LocalCA's server config and checks who gets
// in: the written kubeconfig's client does, over HTTP/2, for each loopback
// name; a client without a certificate does not.
func TestLocalCA(t *testing.T) {
	ca, err := NewLocalCA("127.0.0.7", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto+" "+r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = ca.ServerTLSConfig()
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfigTLS(path, srv.Listener.Addr().String(), ca); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	for _, host := range []string{"127.0.0.1", "localhost"} {
		resp, err := hc.Get("https://" + net.JoinHostPort(host, port) + "/")
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "HTTP/2.0 "+LocalClientName {
			t.Errorf("%s: server saw %q, want HTTP/2.0 and the client certificate %s", host, b, LocalClientName)
		}
	}

	// The serving certificate names the listener's own address.
	leaf, err := x509.ParseCertificate(ca.serving.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "127.0.0.7"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	if err := leaf.VerifyHostname("10.0.0.1"); err == nil {
		t.Error("serving certificate valid for a non-loopback address")
	}

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	defer tr.CloseIdleConnections()
	// The error is the server's alert (certificate required) or, by
	// timing, a broken pipe; either way nothing is served.
	if resp, err := (&http.Client{Transport: tr}).Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a client without a certificate was served")
	}
}

// TestLocalCAsDiffer: every start makes a new CA, so a kubeconfig written
// by an earlier run opens nothing.
func TestLocalCAsDiffer(t *testing.T) {
	a, err := NewLocalCA("127.0.0.1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLocalCA("127.0.0.1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if string(a.CertPEM) == string(b.CertPEM) || string(a.ClientKeyPEM) == string(b.ClientKeyPEM) {
		t.Fatal("two LocalCAs share key material")
	}
	cert, err := tls.X509KeyPair(b.ClientCertPEM, b.ClientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: a.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("one run's client certificate verifies against another run's CA")
	}
}
