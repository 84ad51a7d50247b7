package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestSidecarPresentsCertificateAndToken(t *testing.T) {
	forEachClient(t, testSidecarPresentsCertificateAndToken)
}

func testSidecarPresentsCertificateAndToken(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())
	for _, tc := range []struct {
		name, token, wantAuth string
	}{
		{name: "certificate only", token: "", wantAuth: ""},
		{name: "certificate and token", token: "s3cr3t", wantAuth: "Bearer s3cr3t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, tc.token))
			req := testkit.NewRequest(t, context.Background(), srv.addr, "/api")
			res, err := testkit.RoundTrip(tr.For(srv.addr, AuthSidecar), req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			if got := res.Header.Get("X-Client-CN"); got != "alice" {
				t.Errorf("server saw client CN %q, want alice", got)
			}
			if got := res.Header.Get("X-Authorization"); got != tc.wantAuth {
				t.Errorf("server saw Authorization %q, want %q", got, tc.wantAuth)
			}
			if got := res.Header.Get("X-Proto"); got != "HTTP/2.0" {
				t.Errorf("server saw %s, want HTTP/2.0", got)
			}
			if res.TLS == nil || res.TLS.ServerName != serverName {
				t.Errorf("Response.TLS = %+v, want the connection state with server name %q", res.TLS, serverName)
			}
			if got := req.Header.Get("Authorization"); got != "" {
				t.Errorf("the caller's request was modified: Authorization %q", got)
			}
		})
	}
}

func TestPassthroughSendsNoCertificate(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	// kube-apiserver asks for a certificate but does not require one.
	srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, echoHandler())
	creds := newCreds(p.CA.Pool, &p.Alice.TLS, "sidecar-token")
	tr := newTransports(t, Config{}, creds)

	req := testkit.NewRequest(t, context.Background(), srv.addr, "/api")
	req.Header.Set("Authorization", "Bearer the-clients-own")
	res, err := testkit.RoundTrip(tr.For(srv.addr, AuthPassthrough), req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	if got := res.Header.Get("X-Client-CN"); got != "" {
		t.Errorf("server saw client certificate %q, want none", got)
	}
	if got := res.Header.Get("X-Authorization"); got != "Bearer the-clients-own" {
		t.Errorf("server saw Authorization %q, want the request's own", got)
	}
	if n := creds.certCalls.Load(); n != 0 {
		t.Errorf("ClientCertificate called %d times in passthrough mode", n)
	}
}

func TestForCachesPoolPerEndpointAndMode(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	tr := newTransports(t, Config{}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))

	const n = 32
	got := make([]http.RoundTripper, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = tr.For("10.0.0.1:6443", AuthSidecar)
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if got[i] != got[0] {
			t.Fatalf("concurrent For calls built different pools for one key")
		}
	}
	if tr.For("10.0.0.1:6443", AuthPassthrough) == got[0] {
		t.Errorf("sidecar and passthrough modes share a pool")
	}
	if tr.For("10.0.0.2:6443", AuthSidecar) == got[0] {
		t.Errorf("two endpoints share a pool")
	}
	if len(*tr.pools.Load()) != 3 {
		t.Errorf("%d pools cached, want 3", len(*tr.pools.Load()))
	}
}

func TestDialFailuresAreUnprocessed(t *testing.T) { forEachClient(t, testDialFailuresAreUnprocessed) }

func testDialFailuresAreUnprocessed(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	other := testkit.NewCA(t)
	h2 := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())

	h1srv := newHTTP1Server(t, p)

	noALPN := newRawH2(t, p, false, respond200)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name       string
		addr       string
		serverName string
		roots      *x509.CertPool
		certErr    error
		wantIn     string
		wantAs     func(error) bool
	}{
		{name: "closed port", addr: closedPort, wantIn: "connection refused"},
		{name: "wrong server name", addr: h2.addr, serverName: "not-kubernetes",
			wantAs: func(err error) bool { var e x509.HostnameError; return errors.As(err, &e) }},
		{name: "unknown CA", addr: h2.addr, roots: other.Pool,
			wantAs: func(err error) bool { var e x509.UnknownAuthorityError; return errors.As(err, &e) }},
		{name: "client certificate unavailable", addr: h2.addr, certErr: errTest,
			wantAs: func(err error) bool { return errors.Is(err, errTest) }},
		{name: "HTTP/1.1-only server", addr: h1srv, wantIn: "no application protocol"},
		{name: "server without ALPN", addr: noALPN.Addr, wantIn: `negotiated ALPN protocol "", not "h2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roots := tc.roots
			if roots == nil {
				roots = p.CA.Pool
			}
			creds := newCreds(roots, &p.Alice.TLS, "")
			if tc.certErr != nil {
				creds.certErr.Store(&tc.certErr)
			}
			tr := newTransports(t, Config{Client: client, ServerName: tc.serverName}, creds)
			_, err := testkit.RoundTrip(tr.For(tc.addr, AuthSidecar), testkit.NewRequest(t, context.Background(), tc.addr, "/"))
			if err == nil {
				t.Fatal("RoundTrip succeeded, want a dial error")
			}
			var u *UnprocessedError
			if !errors.As(err, &u) || u.Endpoint != tc.addr {
				t.Fatalf("error %v (%T) is not an UnprocessedError for %s", err, err, tc.addr)
			}
			if tc.wantIn != "" && !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q does not mention %q", err, tc.wantIn)
			}
			if tc.wantAs != nil && !tc.wantAs(err) {
				t.Errorf("error %v does not carry the expected cause", err)
			}
			if got := dials(t, tr, tc.addr, AuthSidecar, "error"); got < 1 {
				t.Errorf("dials_total{result=error} = %v, want >= 1", got)
			}
			if got := dials(t, tr, tc.addr, AuthSidecar, "ok"); got != 0 {
				t.Errorf("dials_total{result=ok} = %v, want 0", got)
			}
			if got := connGauge(t, tr, tc.addr, AuthSidecar); got != 0 {
				t.Errorf("connections gauge = %v after a failed dial", got)
			}
		})
	}
}

func TestRotatedCredentialsApply(t *testing.T) { forEachClient(t, testRotatedCredentialsApply) }

func testRotatedCredentialsApply(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	bob := p.CA.Client("bob")
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())
	creds := newCreds(p.CA.Pool, &p.Alice.TLS, "one")
	tr := newTransports(t, Config{Client: client}, creds)
	rt := tr.For(srv.addr, AuthSidecar)

	check := func(wantCN, wantAuth string) {
		t.Helper()
		res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/"))
		if err != nil {
			t.Fatalf("RoundTrip: %v", err)
		}
		if cn, auth := res.Header.Get("X-Client-CN"), res.Header.Get("X-Authorization"); cn != wantCN || auth != wantAuth {
			t.Fatalf("server saw CN %q and Authorization %q, want %q and %q", cn, auth, wantCN, wantAuth)
		}
	}
	check("alice", "Bearer one")

	// A new token applies to the next request, on the same connection.
	creds.setToken("two")
	check("alice", "Bearer two")
	if n := srv.opened.Load(); n != 1 {
		t.Fatalf("server saw %d connections, want 1", n)
	}

	// A new certificate applies from the next request on, over a new
	// connection; the old one, idle, is closed.
	creds.cert.Store(&bob.TLS)
	check("bob", "Bearer two")
	if n := srv.opened.Load(); n != 2 {
		t.Fatalf("server saw %d connections, want 2", n)
	}
	testkit.WaitFor(t, "the old connection to close", func() bool { return srv.closed.Load() == 1 })
	check("bob", "Bearer two")
	if n := srv.opened.Load(); n != 2 {
		t.Fatalf("server saw %d connections, want 2: the new connection is reused", n)
	}
}

// TestManyWatchesOpenMoreConnections: kube-apiserver allows 100 streams
// per connection; a client with 150 watches must get all 150 answered.
func TestManyWatchesOpenMoreConnections(t *testing.T) {
	forEachClient(t, testManyWatchesOpenMoreConnections)
}

func testManyWatchesOpenMoreConnections(t *testing.T, client Client) {
	const streams, perConn = 150, 100
	p := testkit.NewPKI(t, serverName)
	release := make(chan struct{})
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, perConn, hangingHandler(release))
	tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	rt := tr.For(srv.addr, AuthSidecar)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		res *http.Response
		err error
	}
	results := make(chan result, streams)
	for range streams {
		go func() {
			res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/watch"))
			results <- result{res, err}
		}()
	}
	var bodies []io.ReadCloser
	defer func() {
		close(release)
		for _, b := range bodies {
			io.Copy(io.Discard, b)
			b.Close()
		}
	}()
	timeout := time.After(60 * time.Second)
	for i := range streams {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("watch %d: %v", i, r.err)
			}
			bodies = append(bodies, r.res.Body)
		case <-timeout:
			t.Fatalf("only %d of %d watches got response headers: requests past MAX_CONCURRENT_STREAMS are stuck", i, streams)
		}
	}
	t.Logf("%d streams used %d connections", streams, srv.opened.Load())
	if n := srv.opened.Load(); n < 2 {
		t.Errorf("server saw %d connections for %d streams with %d per connection, want >= 2", n, streams, perConn)
	}
	if g := connGauge(t, tr, srv.addr, AuthSidecar); g < 2 {
		t.Errorf("connections gauge = %v, want >= 2", g)
	}
}

// hangingHandler sends headers at once, like a watch, then holds the
// stream open until release is closed or the client goes away.
func hangingHandler(release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
}

// TestPingDetectsDeadConnection: an apiserver that vanishes without a
// FIN must be noticed by the HTTP/2 health check, ending the watch on it
// and leaving new requests to a fresh connection.
func TestPingDetectsDeadConnection(t *testing.T) { forEachClient(t, testPingDetectsDeadConnection) }

func testPingDetectsDeadConnection(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	release := make(chan struct{})
	defer close(release)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/watch" {
			hangingHandler(release).ServeHTTP(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	proxy := testkit.NewFreezeProxy(t, srv.addr)
	tr := newTransports(t, Config{Client: client, ReadIdleTimeout: 100 * time.Millisecond, PingTimeout: 300 * time.Millisecond},
		newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	rt := tr.For(proxy.Addr, AuthSidecar)

	res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), proxy.Addr, "/watch"))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer res.Body.Close()
	if g := connGauge(t, tr, proxy.Addr, AuthSidecar); g != 1 {
		t.Fatalf("connections gauge = %v, want 1", g)
	}

	proxy.Freeze()
	frozen := time.Now()
	readErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, res.Body)
		readErr <- err
	}()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the watch ended cleanly on a dead connection, want an error")
		}
		t.Logf("watch failed %v after the connection went dead: %v", time.Since(frozen).Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch on a dead connection did not fail: no health check")
	}
	testkit.WaitFor(t, "the dead connection to be closed", func() bool {
		return connGauge(t, tr, proxy.Addr, AuthSidecar) == 0
	})

	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), proxy.Addr, "/")); err != nil {
		t.Fatalf("request after the dead connection: %v", err)
	}
	if n := dials(t, tr, proxy.Addr, AuthSidecar, "ok"); n != 2 {
		t.Errorf("dials_total{result=ok} = %v, want 2 (the request used a new connection)", n)
	}
}

func TestRetainDropsPools(t *testing.T) { forEachClient(t, testRetainDropsPools) }

func testRetainDropsPools(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	a := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())
	b := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())
	tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))

	rtA, rtB := tr.For(a.addr, AuthSidecar), tr.For(b.addr, AuthSidecar)
	rtBp := tr.For(b.addr, AuthPassthrough)
	for _, c := range []struct {
		rt   http.RoundTripper
		addr string
	}{{rtA, a.addr}, {rtB, b.addr}} {
		if _, err := testkit.RoundTrip(c.rt, testkit.NewRequest(t, context.Background(), c.addr, "/")); err != nil {
			t.Fatal(err)
		}
	}

	tr.Retain([]string{a.addr, "10.9.9.9:6443"})

	if got := len(*tr.pools.Load()); got != 1 {
		t.Errorf("%d pools after Retain, want 1", got)
	}
	if tr.For(a.addr, AuthSidecar) != rtA {
		t.Errorf("Retain rebuilt the pool of a kept endpoint")
	}
	testkit.WaitFor(t, "the dropped endpoint's idle connection to close", func() bool { return b.closed.Load() == 1 })
	if a.closed.Load() != 0 {
		t.Errorf("Retain closed a connection of a kept endpoint")
	}
	testkit.WaitFor(t, "the dropped endpoint's gauge to go", func() bool {
		_, ok := metricValue(t, tr, "fanout_upstream_connections", map[string]string{"endpoint": b.addr})
		return !ok
	})
	if _, ok := metricValue(t, tr, "fanout_upstream_dials_total", map[string]string{"endpoint": b.addr}); ok {
		t.Errorf("dial counters of the dropped endpoint are still exported")
	}
	if tr.For(b.addr, AuthSidecar) == rtB || tr.For(b.addr, AuthPassthrough) == rtBp {
		t.Errorf("For returned a dropped pool")
	}
}

// TestRetainClosesBusyConnectionWhenItsStreamEnds: the connection of a
// dropped endpoint that carries a watch stays for the watch, and closes
// as the watch ends, not an IdleConnTimeout later.
func TestRetainClosesBusyConnectionWhenItsStreamEnds(t *testing.T) {
	forEachClient(t, testRetainClosesBusyConnectionWhenItsStreamEnds)
}

func testRetainClosesBusyConnectionWhenItsStreamEnds(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	lines := make(chan string)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, streamingHandler(lines))
	tr := newTransports(t, Config{Client: client, IdleConnTimeout: time.Hour}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	watch, err := tr.For(srv.addr, AuthSidecar).RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	tr.Retain(nil)

	events := bufio.NewReader(watch.Body)
	lines <- "one"
	if got, err := events.ReadString('\n'); err != nil || got != "one\n" {
		t.Fatalf("the watch on a dropped endpoint read %q, %v; want one", got, err)
	}
	if n := srv.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed while the watch was open", n)
	}
	close(lines)
	if _, err := io.Copy(io.Discard, events); err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	testkit.WaitFor(t, "the dropped endpoint's connection to close as its watch ended", func() bool { return srv.closed.Load() == 1 })
}

func TestCloseEndsConnections(t *testing.T) { forEachClient(t, testCloseEndsConnections) }

func testCloseEndsConnections(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	release := make(chan struct{})
	defer close(release)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, hangingHandler(release))
	tr, err := New(Config{Client: client, ServerName: serverName}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	if err != nil {
		t.Fatal(err)
	}
	rt := tr.For(srv.addr, AuthSidecar)
	res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()

	tr.Close()
	if _, err := io.Copy(io.Discard, res.Body); err == nil {
		t.Errorf("a stream outlived Close")
	}
	if g := connGauge(t, tr, srv.addr, AuthSidecar); g != 0 {
		t.Errorf("connections gauge = %v after Close", g)
	}
	for _, rt := range []http.RoundTripper{rt, tr.For(srv.addr, AuthSidecar)} {
		_, err = testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/watch"))
		if !IsUnprocessed(err) || !errors.Is(err, ErrClosed) {
			t.Errorf("request after Close: %v, want an UnprocessedError wrapping ErrClosed", err)
		}
	}
	tr.Close() // idempotent
}

func TestMetricsCountDialsAndConnections(t *testing.T) {
	forEachClient(t, testMetricsCountDialsAndConnections)
}

func testMetricsCountDialsAndConnections(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, echoHandler())
	tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	for _, mode := range []AuthMode{AuthSidecar, AuthPassthrough} {
		for range 3 {
			if _, err := testkit.RoundTrip(tr.For(srv.addr, mode), testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, mode := range []AuthMode{AuthSidecar, AuthPassthrough} {
		if got := dials(t, tr, srv.addr, mode, "ok"); got != 1 {
			t.Errorf("%s: dials_total{result=ok} = %v, want 1 (requests share the connection)", mode, got)
		}
		if got := connGauge(t, tr, srv.addr, mode); got != 1 {
			t.Errorf("%s: connections = %v, want 1", mode, got)
		}
	}
	if got, _ := metricValue(t, tr, "fanout_upstream_tls_handshake_seconds", nil); got != 2 {
		t.Errorf("tls_handshake_seconds count = %v, want 2", got)
	}
}

func TestConfigDefaults(t *testing.T) {
	got, err := Config{ServerName: "kubernetes"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ServerName:                    "kubernetes",
		DialTimeout:                   5 * time.Second,
		ReadIdleTimeout:               5 * time.Second,
		PingTimeout:                   3 * time.Second,
		MaxReceiveBufferPerStream:     1 << 20,
		MaxReceiveBufferPerConnection: 1000 << 20,
		AnswerWindowBudget:            AutoAnswerWindowBudget(debug.SetMemoryLimit(-1)),
		IdleConnTimeout:               90 * time.Second,
		Client:                        ClientOwn,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}

	for _, tc := range []struct {
		name   string
		cfg    Config
		wantIn string
	}{
		{"no server name", Config{}, "ServerName"},
		{"connection window below the HTTP/2 minimum", Config{ServerName: "k", MaxReceiveBufferPerConnection: 1000}, "at least 65535"},
		{"connection window too large", Config{ServerName: "k", MaxReceiveBufferPerConnection: 1 << 31}, "2^31-1"},
		// x/net adds the initial 65,535 bytes in an int32: this would wrap.
		{"connection window plus the initial window too large", Config{ServerName: "k", MaxReceiveBufferPerConnection: 1<<31 - 1}, "2^31-1"},
		{"unknown HTTP/2 client", Config{ServerName: "k", Client: "x/net"}, "--upstream-http2 must be"},
		{"stream window above connection window", Config{ServerName: "k", MaxReceiveBufferPerStream: 4 << 20, MaxReceiveBufferPerConnection: 1 << 20}, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, newCreds(nil, nil, ""))
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("New: %v, want an error mentioning %q", err, tc.wantIn)
			}
		})
	}
	if _, err := New(Config{ServerName: "k"}, nil); err == nil {
		t.Error("New accepted nil Credentials")
	}
}

// TestForHitDoesNotAllocate guards the request path: a cached pool is one
// atomic load and a map lookup.
func TestForHitDoesNotAllocate(t *testing.T) {
	tr := newTransports(t, Config{}, newCreds(nil, nil, ""))
	tr.For("10.0.0.1:6443", AuthSidecar)
	if n := testing.AllocsPerRun(100, func() { tr.For("10.0.0.1:6443", AuthSidecar) }); n != 0 {
		t.Errorf("For on a cached pool allocates %v times", n)
	}
}

func BenchmarkFor(b *testing.B) {
	tr, err := New(Config{ServerName: serverName}, newCreds(nil, nil, ""))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	addrs := []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}
	for _, a := range addrs {
		tr.For(a, AuthSidecar)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tr.For(addrs[i%len(addrs)], AuthSidecar)
			i++
		}
	})
}

// TestEndpointSeriesFromRetain: the dial counters and the connection
// gauge of every endpoint in the set exist, at zero, before its first
// dial, for each mode, and go when it leaves the set.
func TestEndpointSeriesFromRetain(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	tr := newTransports(t, Config{}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	const x, y = "10.9.9.1:6443", "10.9.9.2:6443"
	tr.Retain([]string{x, y})
	for _, addr := range []string{x, y} {
		for _, mode := range []AuthMode{AuthSidecar, AuthPassthrough} {
			for _, result := range []string{"ok", "error"} {
				if v, ok := metricValue(t, tr, "fanout_upstream_dials_total", map[string]string{"endpoint": addr, "mode": mode.String(), "result": result}); !ok || v != 0 {
					t.Errorf("fanout_upstream_dials_total{endpoint=%q,mode=%q,result=%q} = %v (exported: %v) before any dial, want 0", addr, mode, result, v, ok)
				}
			}
			if v, ok := metricValue(t, tr, "fanout_upstream_connections", map[string]string{"endpoint": addr, "mode": mode.String()}); !ok || v != 0 {
				t.Errorf("fanout_upstream_connections{endpoint=%q,mode=%q} = %v (exported: %v) before any dial, want 0", addr, mode, v, ok)
			}
		}
	}
	tr.Retain([]string{y})
	for _, name := range []string{"fanout_upstream_dials_total", "fanout_upstream_connections"} {
		if _, ok := metricValue(t, tr, name, map[string]string{"endpoint": x}); ok {
			t.Errorf("%s of %s is still exported after it left the endpoint set", name, x)
		}
		if _, ok := metricValue(t, tr, name, map[string]string{"endpoint": y}); !ok {
			t.Errorf("%s of %s, still in the set, is gone", name, y)
		}
	}
}
