package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// reloadingCreds are the sidecar's credentials with a Reload that finds
// what onReload puts on "disk".
type reloadingCreds struct {
	roots    *x509.CertPool
	cert     atomic.Pointer[tls.Certificate]
	reloads  atomic.Int32
	onReload func(*reloadingCreds)
}

var _ transport.Reloader = (*reloadingCreds)(nil)

func (c *reloadingCreds) RootCAs() *x509.CertPool                      { return c.roots }
func (c *reloadingCreds) ClientCertificate() (*tls.Certificate, error) { return c.cert.Load(), nil }
func (c *reloadingCreds) Token() (string, error)                       { return "", nil }
func (c *reloadingCreds) Reload() {
	c.reloads.Add(1)
	if c.onReload != nil {
		c.onReload(c)
	}
}

// certBackend is an apiserver that answers 401 to a client certificate
// other than accepted's, as kube-apiserver does to one it no longer
// accepts (or to none), and 200 to accepted's. The test starts srv
// (StartTLS) once the transport's pool is as old as it needs.
type certBackend struct {
	srv      *httptest.Server
	addr     string
	hits     atomic.Int32
	accepted atomic.Pointer[string]
}

func newCertBackend(t *testing.T, ca *testkit.CA, accepted string) *certBackend {
	t.Helper()
	b := &certBackend{}
	b.accepted.Store(&accepted)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != *b.accepted.Load() {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
			return
		}
		w.Header().Set("X-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
		_, _ = io.WriteString(w, "ok")
	}))
	srv.EnableHTTP2 = true
	srv.TLS = ca.ServerTLSConfig(ca.Serving(upgradeServerName), tls.VerifyClientCertIfGiven)
	t.Cleanup(srv.Close)
	b.srv, b.addr = srv, srv.Listener.Addr().String()
	return b
}

// TestUnauthorizedResentThroughAttemptLoop: a 401 that kube-apiserver
// gives to the sidecar's client certificate makes the transport re-read
// the credentials and renew the endpoint's connections, and the attempt
// loop sends the request once more, to the same endpoint, within the retry
// budget and only with a body it can replay. A relayed 401 (a proxy
// subresource, an aggregated API, a kubelet's log) and a 401 to a request
// that brings its own token are passed on untouched.
func TestUnauthorizedResentThroughAttemptLoop(t *testing.T) {
	const own = "/api/v1/namespaces/ns/configmaps"
	for _, tc := range []struct {
		name   string
		method string
		path   string
		header http.Header
		// newCert: the re-read finds bob's certificate; else nothing new.
		newCert bool
		// accepted is the user the apiserver accepts.
		accepted string
		// aged makes the pool's connections older than the transport's
		// least age for a renewal with the same certificate.
		aged     bool
		noReplay bool
		noBudget bool

		wantStatus    int
		wantHits      int32
		wantReloads   int32
		wantRetries   float64
		wantExhausted float64
	}{
		{name: "new certificate on disk", method: "GET", path: own, newCert: true, accepted: "bob",
			wantStatus: 200, wantHits: 2, wantReloads: 1, wantRetries: 1},
		{name: "replayable body", method: "POST", path: own, newCert: true, accepted: "bob",
			wantStatus: 200, wantHits: 2, wantReloads: 1, wantRetries: 1},
		{name: "own group", method: "POST", path: "/apis/apps/v1/deployments", newCert: true, accepted: "bob",
			wantStatus: 200, wantHits: 2, wantReloads: 1, wantRetries: 1},
		{name: "body that cannot be replayed: the 401 stands", method: "POST", path: own, newCert: true, accepted: "bob", noReplay: true,
			wantStatus: 401, wantHits: 1, wantReloads: 1},
		{name: "retry budget spent: the 401 stands", method: "GET", path: own, newCert: true, accepted: "bob", noBudget: true,
			wantStatus: 401, wantHits: 1, wantReloads: 1, wantExhausted: 1},
		{name: "nothing new on disk, fresh connections: not sent again", method: "GET", path: own, accepted: "nobody",
			wantStatus: 401, wantHits: 1, wantReloads: 1},
		{name: "nothing new on disk, old connections: sent again once", method: "GET", path: own, accepted: "nobody", aged: true,
			wantStatus: 401, wantHits: 2, wantReloads: 1, wantRetries: 1},
		{name: "relayed: service proxy", method: "POST", path: "/api/v1/namespaces/ns/services/x/proxy/", newCert: true, accepted: "bob",
			wantStatus: 401, wantHits: 1},
		{name: "relayed: aggregated API", method: "POST", path: "/apis/example.dev/v1/widgets", newCert: true, accepted: "bob",
			wantStatus: 401, wantHits: 1},
		{name: "relayed: pod log", method: "GET", path: "/api/v1/namespaces/ns/pods/p/log", newCert: true, accepted: "bob",
			wantStatus: 401, wantHits: 1},
		{name: "own token", method: "GET", path: own, header: http.Header{"Authorization": {"Bearer x"}}, newCert: true, accepted: "bob",
			wantStatus: 401, wantHits: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble's own CA: its certificates are valid at the
				// bubble's time.
				ca := testkit.NewCA(t)
				alice, bob := ca.Client("alice"), ca.Client("bob")
				b := newCertBackend(t, ca, tc.accepted)
				// Another endpoint that accepts anything: the request sent
				// again must not end up there, where the pool was not renewed.
				other := newCertBackend(t, ca, "alice")
				creds := &reloadingCreds{roots: ca.Pool}
				if tc.newCert {
					creds.onReload = func(c *reloadingCreds) { c.cert.Store(&bob.TLS) }
				}
				creds.cert.Store(&alice.TLS)
				tr, err := transport.New(transport.Config{ServerName: upgradeServerName}, creds)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(tr.Close)
				tr.For(b.addr, transport.AuthSidecar) // the pool is born now
				if tc.aged {
					// Before the backends start: the bubble's clock stands
					// still while a server waits on its socket.
					time.Sleep(2 * time.Second)
				}
				b.srv.StartTLS()
				other.srv.StartTLS()
				cfg := Config{}
				if tc.noReplay {
					cfg.MaxReplayBody = -1
				}
				if tc.noBudget {
					cfg.RetryBudget = &RetryBudget{Window: time.Second}
				}
				m, err := NewMetrics(prometheus.NewRegistry())
				if err != nil {
					t.Fatal(err)
				}
				p := proxytest.NewPicker(b.addr, other.addr)
				h := New(cfg, p, tr, m)

				var body io.Reader
				if tc.method == http.MethodPost {
					body = strings.NewReader(`{"kind":"ConfigMap"}`)
				}
				req := httptest.NewRequest(tc.method, tc.path, body)
				for k, v := range tc.header {
					req.Header[k] = v
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)

				if rec.Code != tc.wantStatus {
					t.Errorf("status %d, want %d", rec.Code, tc.wantStatus)
				}
				if n := b.hits.Load(); n != tc.wantHits {
					t.Errorf("the endpoint got the request %d times, want %d", n, tc.wantHits)
				}
				if n := other.hits.Load(); n != 0 {
					t.Errorf("the other endpoint got the request %d times: a 401 is sent again only where the connections were renewed", n)
				}
				if n := creds.reloads.Load(); n != tc.wantReloads {
					t.Errorf("credentials re-read %d times, want %d", n, tc.wantReloads)
				}
				if got := testutil.ToFloat64(m.retries.WithLabelValues(reasonUnauthorized)); got != tc.wantRetries {
					t.Errorf("fanout_retries_total{reason=unauthorized} = %v, want %v", got, tc.wantRetries)
				}
				if got := testutil.ToFloat64(m.budgetOut.WithLabelValues(reasonUnauthorized)); got != tc.wantExhausted {
					t.Errorf("fanout_retry_budget_exhausted_total{reason=unauthorized} = %v, want %v", got, tc.wantExhausted)
				}
				// ServeHTTP returns once the answer's body is closed, so every
				// pick has reported. No waitDone: its sleep would never end
				// while the transport's connections wait on their sockets.
				if picks := p.Records(); len(picks) != int(tc.wantHits) {
					t.Errorf("%d picks, want %d", len(picks), tc.wantHits)
				}
				p.CheckDoneOnce(t)
			})
		})
	}
}
