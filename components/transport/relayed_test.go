package transport

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRelayedUnauthorizedIsPassedOn: a 401 to a request whose answer may be
// another server's (a proxy subresource, an aggregated API) is returned as
// is: no credential reload, no new connection, no second attempt. The same
// 401 to kube-apiserver's own request still does all three.
func TestRelayedUnauthorizedIsPassedOn(t *testing.T) {
	p := newPKI(t)
	bob := p.ca.Client("bob")
	for _, tc := range []struct {
		name        string
		relayed     bool
		wantStatus  int
		wantHits    int32
		wantReloads int32
		wantOpened  int32
	}{
		{name: "own answer", wantStatus: 200, wantHits: 2, wantReloads: 1, wantOpened: 2},
		{name: "relayed answer", relayed: true, wantStatus: 401, wantHits: 1, wantReloads: 0, wantOpened: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				unauthorizedUnless(func() string { return "bob" }).ServeHTTP(w, r)
			}))
			fc := newCreds(p.ca.Pool, &p.alice.TLS, "")
			creds := &reloadingCreds{fakeCreds: fc, onReload: func() { fc.cert.Store(&bob.TLS) }}
			tr := newTransports(t, Config{}, creds)
			ctx := context.Background()
			if tc.relayed {
				ctx = WithRelayedAnswer(ctx)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+srv.addr+"/api/v1/namespaces/ns/services/x/proxy/", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("{}")), nil }
			res, err := roundTrip(tr.For(srv.addr, AuthSidecar), req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			if res.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d", res.StatusCode, tc.wantStatus)
			}
			if n := hits.Load(); n != tc.wantHits {
				t.Errorf("the server got the request %d times, want %d", n, tc.wantHits)
			}
			if n := creds.reloads.Load(); n != tc.wantReloads {
				t.Errorf("credentials re-read %d times, want %d", n, tc.wantReloads)
			}
			if n := srv.opened.Load(); n != tc.wantOpened {
				t.Errorf("server saw %d connections, want %d", n, tc.wantOpened)
			}
			if got, _ := metricValue(t, tr, "fanout_upstream_unauthorized_retries_total", nil); got != float64(tc.wantHits-1) {
				t.Errorf("unauthorized retries = %v, want %d", got, tc.wantHits-1)
			}
		})
	}
}
