package certs

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestRoundTripper sends requests through NewRoundTripper to an HTTP/2
// TLS server that requires a client certificate: they carry the client
// certificate and the token, over HTTP/2 with the server name verified.
// After the files rotate and a 401 made the credentials re-read them,
// requests go with the new certificate and token over a new connection,
// and the old idle one is closed.
func TestRoundTripper(t *testing.T) {
	f := newFixture(t)
	bob := f.ca.Client("bob")
	tokenFile := testkit.WriteFile(t, f.dir, "token", []byte("tok-1\n"))
	var closed atomic.Int32
	srv := testkit.NewAPIServer(t, f.ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/unauthorized" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "%s %s HTTP/%d", r.TLS.PeerCertificates[0].Subject.CommonName, r.Header.Get("Authorization"), r.ProtoMajor)
	}), testkit.WithClientAuth(tls.RequireAndVerifyClientCert), testkit.WithConnState(func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}))

	creds, err := NewCredentials(&Upstream{CA: Source{Path: f.caFile}, ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: f.keyFile}, Token: Source{Path: tokenFile}})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: NewRoundTripper(creds, "kubernetes")}
	defer c.CloseIdleConnections()
	get := func(path string) string {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got, want := get("/"), "alice Bearer tok-1 HTTP/2"; got != want {
		t.Fatalf("first request: %q, want %q", got, want)
	}

	testkit.WriteFile(t, f.dir, "pki/alice.crt", bob.CertPEM)
	testkit.WriteFile(t, f.dir, "pki/alice.key", bob.KeyPEM)
	if err := os.WriteFile(tokenFile, []byte("tok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	get("/unauthorized")
	if got, want := get("/"), "bob Bearer tok-2 HTTP/2"; got != want {
		t.Fatalf("after the rotation: %q, want %q", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for closed.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the connection made with the old certificate is still open")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Another name than the certificate's fails verification.
	wrong := &http.Client{Transport: NewRoundTripper(creds, "other.example")}
	if _, err := wrong.Get(srv.URL); err == nil {
		t.Error("a request verifying server name other.example succeeded")
	}
}
