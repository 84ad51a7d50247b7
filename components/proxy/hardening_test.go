package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestConnectionUpgradeNeedsUpgradeHeader: "Connection: upgrade" without
// an Upgrade header names no protocol to switch to. Such a request is a
// plain one: it goes through the HTTP/2 pool like any other, and does not
// cost a dedicated HTTP/1.1 connection and TLS handshake to an apiserver
// (here, an Upstream that cannot dial upgrades would answer 501).
func TestConnectionUpgradeNeedsUpgradeHeader(t *testing.T) {
	p, u := proxytest.OKBackend(t)
	s, _, _ := startProxy(t, Config{}, p, u, nil)
	for _, conn := range []string{"upgrade", "Upgrade", "keep-alive, Upgrade"} {
		resp := testkit.RawRequest(t, s.Addr().String(), "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "+conn+"\r\n\r\n")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Errorf("Connection: %s without Upgrade: %d %q, want the apiserver's 200 \"ok\" by the plain path", conn, resp.StatusCode, b)
		}
	}
	// The classification behind the handler (the listener's limits read
	// the same reqinfo.Info: components/listener TestLimitKind).
	r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	r.Header.Set("Connection", "Upgrade")
	if info := reqinfo.New(r); info.Upgrade || info.H2COffer || classify(info).Kind != balancer.Short {
		t.Errorf("reqinfo.New = %+v: an upgrade without an Upgrade header", info)
	}
	r.Header.Set("Upgrade", "SPDY/3.1")
	if info := reqinfo.New(r); !info.Upgrade {
		t.Errorf("reqinfo.New = %+v: not an upgrade for Connection: Upgrade with Upgrade: SPDY/3.1", info)
	}
}

// identityHeaders are front-proxy identity headers a local process might
// send, in the spellings a client may use.
var identityHeaders = map[string]string{
	"X-Remote-User":         "system:admin",
	"X-Remote-Group":        "system:masters",
	"X-Remote-Uid":          "0",
	"X-Remote-Extra-Scopes": "all",
	"x-remote-extra-acme":   "1",
}

// impersonation headers are the client's own and pass through.
var impersonationHeaders = map[string]string{
	"Impersonate-User":        "jane",
	"Impersonate-Group":       "developers",
	"Impersonate-Uid":         "42",
	"Impersonate-Extra-Scope": "view",
}

func checkForwardedIdentity(t *testing.T, got http.Header) {
	t.Helper()
	for k := range got {
		if isIdentityHeader(k) {
			t.Errorf("%s reached the apiserver: fanout sends the client's certificate, so a front-proxy identity header must not go with it", k)
		}
	}
	for k, v := range impersonationHeaders {
		if got.Get(k) != v {
			t.Errorf("%s = %q at the apiserver, want %q passed through", k, got.Get(k), v)
		}
	}
}

// TestIdentityHeadersStripped: X-Remote-User, -Group, -Uid and
// -Extra-* never reach the apiserver, on the plain path (HTTP/1.1 and
// h2c) and on the upgrade path; Impersonate-* do.
func TestIdentityHeadersStripped(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain, h2c=%v", h2c), func(t *testing.T) {
			var mu sync.Mutex
			var seen http.Header
			addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = r.Header.Clone()
				mu.Unlock()
				io.WriteString(w, "ok")
			}), true) // HTTP/1.1 upstream: headers arrive as sent
			u := proxytest.NewUpstream()
			u.Set(addr, rt)
			_, _, base := startProxy(t, Config{}, proxytest.NewPicker(addr), u, nil)
			req, err := http.NewRequest(http.MethodGet, base+"/api/v1/pods", nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range identityHeaders {
				req.Header[k] = []string{v} // as spelled, not canonicalised
			}
			for k, v := range impersonationHeaders {
				req.Header.Set(k, v)
			}
			resp, err := testkit.NewClient(t, h2c).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// Read to the end: the handler has then reported Done.
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			mu.Lock()
			defer mu.Unlock()
			checkForwardedIdentity(t, seen)
		})
	}
	t.Run("upgrade", func(t *testing.T) {
		// request builds the request the apiserver gets on the
		// upgrade path.
		a := &upgradeAttempt{h: &Handler{upgrader: nopUpgradeDialer{}}, mode: transport.AuthSidecar}
		req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/pods/p/exec?command=sh", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "SPDY/3.1")
		for k, v := range identityHeaders {
			req.Header[k] = []string{v}
		}
		for k, v := range impersonationHeaders {
			req.Header.Set(k, v)
		}
		out, err := a.request(req)
		if err != nil {
			t.Fatal(err)
		}
		checkForwardedIdentity(t, out.Header)
	})
}

type nopUpgradeDialer struct{}

func (nopUpgradeDialer) DialUpgrade(context.Context, string, transport.AuthMode) (net.Conn, error) {
	return nil, fmt.Errorf("not dialing in this test")
}
func (nopUpgradeDialer) AuthorizeUpgrade(http.Header, transport.AuthMode) error { return nil }
