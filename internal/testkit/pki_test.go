package testkit

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestIssuedCertificatesVerify(t *testing.T) {
	ca := NewCA(t)
	other := NewCA(t)
	serving := ca.Serving("kubernetes", "127.0.0.1", "::1")
	client := ca.Client("alice", "system:masters", "team")

	for _, tc := range []struct {
		name  string
		leaf  *x509.Certificate
		roots *x509.CertPool
		opts  x509.VerifyOptions
		ok    bool
	}{
		{"serving by DNS name", serving.Leaf, ca.Pool, x509.VerifyOptions{DNSName: "kubernetes"}, true},
		{"serving by IPv4", serving.Leaf, ca.Pool, x509.VerifyOptions{DNSName: "127.0.0.1"}, true},
		{"serving by IPv6", serving.Leaf, ca.Pool, x509.VerifyOptions{DNSName: "::1"}, true},
		{"serving, wrong name", serving.Leaf, ca.Pool, x509.VerifyOptions{DNSName: "other"}, false},
		{"serving, other CA", serving.Leaf, other.Pool, x509.VerifyOptions{DNSName: "kubernetes"}, false},
		{"serving used as client", serving.Leaf, ca.Pool, x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, false},
		{"client", client.Leaf, ca.Pool, x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
		{"client used as server", client.Leaf, ca.Pool, x509.VerifyOptions{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Roots = tc.roots
			_, err := tc.leaf.Verify(tc.opts)
			if (err == nil) != tc.ok {
				t.Errorf("Verify: %v, want ok=%v", err, tc.ok)
			}
		})
	}

	if client.Leaf.Subject.CommonName != "alice" || len(client.Leaf.Subject.Organization) != 2 {
		t.Errorf("client subject %v, want CN alice with two organizations", client.Leaf.Subject)
	}
	if _, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM); err != nil {
		t.Errorf("PEM pair does not load: %v", err)
	}
	if client.TLS.Leaf != client.Leaf {
		t.Errorf("TLS.Leaf not set")
	}
	cfg := ca.ServerTLSConfig(serving, tls.RequireAndVerifyClientCert)
	if cfg.ClientCAs != ca.Pool || len(cfg.Certificates) != 1 {
		t.Errorf("ServerTLSConfig = %+v", cfg)
	}

	p := WriteFile(t, t.TempDir(), "a/b/ca.crt", ca.CertPEM)
	if b, err := os.ReadFile(p); err != nil || string(b) != string(ca.CertPEM) {
		t.Errorf("WriteFile: %v", err)
	}
}
