package testkit

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestAPIServer checks what the tests rely on: HTTP/2 over TLS for the
// configured names, /readyz answered by the kit as set, other requests
// passed to the handler, counted and recorded with the client's CN.
func TestAPIServer(t *testing.T) {
	ca := NewCA(t)
	alice := ca.Client("alice")
	a := NewAPIServer(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "handled "+r.URL.Path)
	}), WithNames("kubernetes", "127.0.0.1"), WithClientAuth(tls.RequireAndVerifyClientCert))

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{alice.TLS}}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, a.URL+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Errorf("%s answered over %s, want HTTP/2", path, resp.Proto)
		}
		return resp.StatusCode, string(b)
	}

	for _, tc := range []struct {
		name     string
		readyz   int
		path     string
		wantCode int
		wantBody string
	}{
		{"ready", http.StatusOK, "/readyz", 200, "ok"},
		{"shutting down", http.StatusServiceUnavailable, "/readyz", 503, "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		{"handler", http.StatusServiceUnavailable, "/api/v1/pods", 200, "handled /api/v1/pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.SetReadyz(tc.readyz)
			if code, body := get(tc.path); code != tc.wantCode || body != tc.wantBody {
				t.Errorf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
	if p, r := a.Probes.Load(), a.Requests.Load(); p != 2 || r != 1 {
		t.Errorf("Probes %d, Requests %d, want 2 and 1", p, r)
	}
	seen := a.Seen()
	if len(seen) != 3 {
		t.Fatalf("recorded %d requests, want 3", len(seen))
	}
	if s := seen[2]; s.Path != "/api/v1/pods" || s.CN != "alice" || s.Authorization != "Bearer tok" || s.Proto != "HTTP/2.0" || s.Method != http.MethodGet {
		t.Errorf("recorded %+v", s)
	}

	// The certificate is valid for the names given only.
	wrong := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{alice.TLS}, ServerName: "other"}}
	defer wrong.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: wrong}).Get(a.URL + "/readyz"); err == nil {
		resp.Body.Close()
		t.Error("a client verifying the name other got an answer")
	}
}

// TestAPIServerDelay: a delayed answer waits, and a client that gives up
// does not get one.
func TestAPIServerDelay(t *testing.T) {
	ca := NewCA(t)
	a := NewAPIServer(t, ca, nil)
	a.SetDelay(time.Hour)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "kubernetes"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 100 * time.Millisecond}
	if resp, err := c.Get(a.URL + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatal("answered before the delay")
	}
	a.SetDelay(0)
	c.Timeout = 10 * time.Second
	resp, err := c.Get(a.URL + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("nil handler answered %d, want 404", resp.StatusCode)
	}
	if a.Addr() != a.Listener.Addr().String() {
		t.Errorf("Addr %q", a.Addr())
	}
}

// TestAPIServerConnsAndALPN: Opened and Closed count connections, and
// WithALPN decides what a client can negotiate.
func TestAPIServerConnsAndALPN(t *testing.T) {
	ca := NewCA(t)
	for _, tc := range []struct {
		name      string
		opts      []APIServerOption
		wantProto string
	}{
		{"default is HTTP/2", nil, "HTTP/2.0"},
		{"http/1.1 alone", []APIServerOption{WithALPN("http/1.1")}, "HTTP/1.1"},
		{"both, h2 preferred", []APIServerOption{WithALPN("h2", "http/1.1")}, "HTTP/2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAPIServer(t, ca, Echo(), tc.opts...)
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "kubernetes"}, ForceAttemptHTTP2: true}
			res, err := RoundTrip(tr, NewRequest(t, t.Context(), a.Addr(), "/x"))
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Header.Get("X-Proto"); got != tc.wantProto {
				t.Errorf("Echo saw %s, want %s", got, tc.wantProto)
			}
			if n := a.Opened.Load(); n != 1 {
				t.Errorf("Opened %d after one request, want 1", n)
			}
			tr.CloseIdleConnections()
			WaitFor(t, "the server to see the connection close", func() bool { return a.Closed.Load() == 1 })
		})
	}
}
