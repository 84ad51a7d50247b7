package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// reloadingCreds are fakeCreds whose Reload runs onReload.
type reloadingCreds struct {
	*fakeCreds
	reloads  atomic.Int32
	onReload func()
}

var _ Reloader = (*reloadingCreds)(nil)

func (c *reloadingCreds) Reload() {
	c.reloads.Add(1)
	if c.onReload != nil {
		c.onReload()
	}
}

// streamingHandler serves /watch as a stream that writes a line each
// time something arrives on lines; anything else is echoHandler.
var streamingHandler = testkit.Streaming

// TestRotatedCertificateDrainsOldConnections: after a client certificate
// rotation, new requests go to a new connection with the new certificate,
// while a watch on the old connection carries on; the old connection
// closes once the watch ends.
func TestRotatedCertificateDrainsOldConnections(t *testing.T) {
	forEachClient(t, testRotatedCertificateDrainsOldConnections)
}

func testRotatedCertificateDrainsOldConnections(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	bob := p.CA.Client("bob")
	lines := make(chan string)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, streamingHandler(lines))
	creds := newCreds(p.CA.Pool, &p.Alice.TLS, "")
	tr := newTransports(t, Config{Client: client}, creds)
	rt := tr.For(srv.addr, AuthSidecar)

	watch, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/watch"))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer watch.Body.Close()
	if cn := watch.Header.Get("X-Client-CN"); cn != "alice" {
		t.Fatalf("watch went with CN %q, want alice", cn)
	}
	events := bufio.NewReader(watch.Body)
	readEvent := func(want string) {
		t.Helper()
		lines <- want
		got, err := events.ReadString('\n')
		if err != nil || strings.TrimSpace(got) != want {
			t.Fatalf("watch read %q, %v; want %q", got, err, want)
		}
	}
	readEvent("one")

	creds.cert.Store(&bob.TLS)
	for i := 0; i < 3; i++ {
		res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/"))
		if err != nil {
			t.Fatalf("request %d after the rotation: %v", i, err)
		}
		if cn := res.Header.Get("X-Client-CN"); cn != "bob" {
			t.Fatalf("request %d after the rotation went with CN %q, want bob", i, cn)
		}
	}
	if n := srv.opened.Load(); n != 2 {
		t.Fatalf("server saw %d connections, want 2 (the watch's, and one new for every later request)", n)
	}
	if got, _ := metricValue(t, tr, "fanout_upstream_connection_rotations_total", map[string]string{"reason": "certificate"}); got != 1 {
		t.Errorf("rotations{reason=certificate} = %v, want 1", got)
	}

	// Several drain rounds pass: the old connection must stay for the
	// watch, which keeps receiving. Waiting on the drainer's own count of
	// rounds, rather than on the clock, proves the rounds ran. The gauge
	// is the client's side, updated as the drainer closes a connection;
	// the server notices a close later, so its count is only a second
	// check.
	rounds := tr.drainRounds.Load()
	testkit.WaitFor(t, "three drain rounds", func() bool { return tr.drainRounds.Load() >= rounds+3 })
	if g := connGauge(t, tr, srv.addr, AuthSidecar); g != 2 {
		t.Fatalf("connections gauge = %v after three drain rounds, want 2: the old connection closed while the watch was open on it", g)
	}
	if n := srv.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed while the watch was open on the old one", n)
	}
	readEvent("two")

	// The watch ends: the old connection closes, the new one stays.
	close(lines)
	if _, err := io.Copy(io.Discard, watch.Body); err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	testkit.WaitFor(t, "the old connection to close", func() bool { return srv.closed.Load() == 1 })
	res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/"))
	if err != nil || res.Header.Get("X-Client-CN") != "bob" {
		t.Fatalf("request after the drain: %v", err)
	}
	if n := srv.opened.Load(); n != 2 {
		t.Errorf("server saw %d connections, want 2", n)
	}
	testkit.WaitFor(t, "the gauge to count one connection", func() bool { return connGauge(t, tr, srv.addr, AuthSidecar) == 1 })
}

// TestRotationUnderConcurrentRequests rotates the certificate many times
// while requests run. Under -race it checks the rotation's
// synchronisation; it also checks which certificate the server saw: a
// request sent after a rotation presents the new certificate, or one
// that replaced it while the request ran, never an older one.
func TestRotationUnderConcurrentRequests(t *testing.T) {
	forEachClient(t, testRotationUnderConcurrentRequests)
}

func testRotationUnderConcurrentRequests(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	pairs := []*tls.Certificate{&p.Alice.TLS}
	cns := []string{"alice"}
	for _, cn := range []string{"bob", "carol", "dave"} {
		kp := p.CA.Client(cn)
		pairs = append(pairs, &kp.TLS)
		cns = append(cns, cn)
	}
	// seen counts requests by the client certificate the server saw.
	var seenMu sync.Mutex
	seen := map[string]int{}
	echo := echoHandler()
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenMu.Lock()
		seen[r.TLS.PeerCertificates[0].Subject.CommonName]++
		seenMu.Unlock()
		echo.ServeHTTP(w, r)
	}))
	creds := newCreds(p.CA.Pool, pairs[0], "")
	tr := newTransports(t, Config{Client: client}, creds)
	rt := tr.For(srv.addr, AuthSidecar)

	// Rotation i stores pairs[i%len(pairs)]: begun is raised before the
	// store and stored after it, so a request sent when stored was lo
	// and answered when begun was hi may present the certificate of any
	// rotation in [lo, hi], and no other.
	var begun, stored, completed atomic.Int64
	allowed := func(lo, hi int64) map[string]bool {
		ok := map[string]bool{}
		for i := lo; i <= hi && i < lo+int64(len(cns)); i++ {
			ok[cns[i%int64(len(cns))]] = true
		}
		return ok
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				lo := stored.Load()
				res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/"))
				if err != nil {
					errs <- err
					return
				}
				hi := begun.Load()
				if cn := res.Header.Get("X-Client-CN"); !allowed(lo, hi)[cn] {
					errs <- fmt.Errorf("a request sent after rotation %d and answered before rotation %d presented %q, want one of %v", lo, hi+1, cn, allowed(lo, hi))
					return
				}
				completed.Add(1)
			}
		})
	}
	for i := int64(1); i <= 12; i++ {
		// Let the workers run on the current certificate first.
		n := completed.Load()
		testkit.WaitFor(t, "the workers to send 16 requests", func() bool { return completed.Load() >= n+16 || len(errs) > 0 })
		begun.Store(i)
		creds.cert.Store(pairs[i%int64(len(pairs))])
		stored.Store(i)
		res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/"))
		if err != nil {
			t.Fatalf("request after rotation %d: %v", i, err)
		}
		if cn, want := res.Header.Get("X-Client-CN"), cns[i%int64(len(cns))]; cn != want {
			t.Fatalf("request after rotation %d presented the certificate of %q, want %q: the client certificate was not rotated", i, cn, want)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("during rotations: %v", err)
	}
	seenMu.Lock()
	for _, cn := range cns {
		if seen[cn] == 0 {
			t.Errorf("the server saw no request with the certificate of %q; saw %v", cn, seen)
		}
	}
	seenMu.Unlock()
	// Every old generation drains: one connection is left.
	testkit.WaitFor(t, "old connections to close", func() bool { return connGauge(t, tr, srv.addr, AuthSidecar) == 1 })
}

// unauthorizedUnless answers 401 to requests whose client certificate is
// not from user, as kube-apiserver does for a certificate it no longer
// accepts, and echoes the others.
func unauthorizedUnless(user func() string) http.Handler {
	echo := echoHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS.PeerCertificates[0].Subject.CommonName != user() {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"kind":"Status","code":401}`)
			return
		}
		echo.ServeHTTP(w, r)
	})
}

// TestRenewAfterUnauthorized: a 401 on a client-certificate connection is
// returned as is; RenewAfterUnauthorized then re-reads the credentials and
// moves the pool to new connections, unless they are fresh and the
// certificate is theirs, and says whether sending again could help. The
// transport never sends twice itself.
func TestRenewAfterUnauthorized(t *testing.T) {
	for _, tc := range []struct {
		name string
		// newCert: the re-read finds bob's certificate; else nothing new.
		newCert bool
		// accepted is the user the server accepts.
		accepted string
		// advance is the pool's age at the request.
		advance time.Duration
		noCert  bool

		wantRenewed bool
		wantReloads int32
		// wantStatus and wantCN are the answer to the request sent again
		// after RenewAfterUnauthorized, wantOpened the connections the
		// server saw by then.
		wantStatus int
		wantCN     string
		wantOpened int32
	}{
		{
			name:    "reload finds a new certificate",
			newCert: true, accepted: "bob",
			wantRenewed: true, wantReloads: 1, wantStatus: 200, wantCN: "bob", wantOpened: 2,
		},
		{
			name:     "nothing new on disk: one re-dial, then the 401",
			accepted: "nobody", advance: 2 * minRenew,
			wantRenewed: true, wantReloads: 1, wantStatus: 401, wantOpened: 2,
		},
		{
			name:        "nothing new on disk and fresh connections: no renewal",
			accepted:    "nobody",
			wantRenewed: false, wantReloads: 1, wantStatus: 401, wantOpened: 1,
		},
		{
			name:     "token-only user: nothing to renew",
			accepted: "nobody", noCert: true,
			wantRenewed: false, wantReloads: 0, wantStatus: 401, wantOpened: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble's own PKI: its certificates are valid at the
				// bubble's time.
				p := testkit.NewPKI(t, serverName)
				bob := p.CA.Client("bob")
				var hits atomic.Int32
				srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					if len(r.TLS.PeerCertificates) == 0 {
						w.WriteHeader(http.StatusUnauthorized)
						return
					}
					unauthorizedUnless(func() string { return tc.accepted }).ServeHTTP(w, r)
				}), testkit.Unstarted())
				cert := &p.Alice.TLS
				if tc.noCert {
					cert = nil
				}
				fc := newCreds(p.CA.Pool, cert, "")
				creds := &reloadingCreds{fakeCreds: fc, onReload: func() {
					if tc.newCert {
						fc.cert.Store(&bob.TLS)
					}
				}}
				tr := newTransports(t, Config{}, creds)
				rt := tr.For(srv.addr, AuthSidecar)
				// The pool ages before the server starts: the bubble's clock
				// stands still while the server waits on its socket.
				time.Sleep(tc.advance)
				srv.StartTLS()

				res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/api"))
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				if res.StatusCode != http.StatusUnauthorized || hits.Load() != 1 {
					t.Fatalf("first answer %d after %d requests, want the 401 after one: the transport must not send again", res.StatusCode, hits.Load())
				}
				if got := RenewAfterUnauthorized(res); got != tc.wantRenewed {
					t.Errorf("RenewAfterUnauthorized = %v, want %v", got, tc.wantRenewed)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if n := creds.reloads.Load(); n != tc.wantReloads {
					t.Errorf("credentials re-read %d times, want %d", n, tc.wantReloads)
				}
				// What the proxy's attempt loop does when it sends again.
				res, err = testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/api"))
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				if res.StatusCode != tc.wantStatus || res.Header.Get("X-Client-CN") != tc.wantCN {
					t.Errorf("sent again: %d with CN %q, want %d with CN %q", res.StatusCode, res.Header.Get("X-Client-CN"), tc.wantStatus, tc.wantCN)
				}
				if n := srv.opened.Load(); n != tc.wantOpened {
					t.Errorf("server saw %d connections, want %d", n, tc.wantOpened)
				}
			})
		})
	}
}

// TestRenewAfterUnauthorizedIgnoresOtherAnswers: only a 401 the transport
// got on a client-certificate connection renews anything.
func TestRenewAfterUnauthorizedIgnoresOtherAnswers(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, echoHandler())
	fc := newCreds(p.CA.Pool, &p.Alice.TLS, "")
	creds := &reloadingCreds{fakeCreds: fc}
	tr := newTransports(t, Config{}, creds)
	res, err := tr.For(srv.addr, AuthSidecar).RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	other := &http.Response{StatusCode: http.StatusUnauthorized, Body: http.NoBody}
	if RenewAfterUnauthorized(res) || RenewAfterUnauthorized(other) || creds.reloads.Load() != 0 {
		t.Errorf("a 200 or a 401 from elsewhere renewed (reloads %d)", creds.reloads.Load())
	}
}

// TestCloseEndsDrainers: Close while a retired generation still carries a
// stream ends the stream and the drainer (goleak checks the goroutine).
func TestCloseEndsDrainers(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	bob := p.CA.Client("bob")
	lines := make(chan string)
	defer close(lines)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, streamingHandler(lines))
	creds := newCreds(p.CA.Pool, &p.Alice.TLS, "")
	tr, err := New(Config{ServerName: serverName}, creds)
	if err != nil {
		t.Fatal(err)
	}
	rt := tr.For(srv.addr, AuthSidecar)
	watch, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	creds.cert.Store(&bob.TLS)
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { tr.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while an old generation was draining")
	}
	if _, err := io.Copy(io.Discard, watch.Body); err == nil {
		t.Error("the watch on the old connection survived Close")
	}
}
