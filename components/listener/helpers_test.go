package listener

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// The listener is tested in front of the real request path
// (proxy.Handler) over fake endpoints: these helpers are small copies of
// components/proxy's.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait in these tests. It is a failure bound for
// hangs, not a speed target: passing tests never come near it.
const waitLimit = 30 * time.Second

// fakePicker always picks its one endpoint and counts every Done per pick.
type fakePicker struct {
	ep    *balancer.Endpoint
	mu    sync.Mutex
	dones []int
}

func newFakePicker(addr string) *fakePicker {
	return &fakePicker{ep: balancer.NewEndpoint(addr)}
}

func (p *fakePicker) Pick(info balancer.PickInfo) (balancer.Pick, error) {
	if info.Unloaded {
		return balancer.Pick{}, balancer.ErrNoAlternative
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := len(p.dones)
	p.dones = append(p.dones, 0)
	return balancer.NewPick(p.ep, func(balancer.DoneInfo) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.dones[i]++
	}), nil
}

// checkDoneOnce must run after the server stopped: by then every response
// body was closed, so every pick must have reported exactly once.
func (p *fakePicker) checkDoneOnce(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, n := range p.dones {
		if n != 1 {
			t.Errorf("pick %d: Done called %d times, want exactly 1", i, n)
		}
	}
}

// fakeUpstream maps addresses to RoundTrippers and records every For call.
type fakeUpstream struct {
	mu    sync.Mutex
	rts   map[string]http.RoundTripper
	calls []upstreamCall
}

type upstreamCall struct{ addr string }

func (u *fakeUpstream) callList() []upstreamCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamCall(nil), u.calls...)
}

func newFakeUpstream() *fakeUpstream { return &fakeUpstream{rts: map[string]http.RoundTripper{}} }

func (u *fakeUpstream) set(addr string, rt http.RoundTripper) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rts[addr] = rt
}

func (u *fakeUpstream) For(addr string, _ transport.AuthMode) http.RoundTripper {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, upstreamCall{addr})
	if rt, ok := u.rts[addr]; ok {
		return rt
	}
	return roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, &transport.UnprocessedError{Endpoint: addr, Err: errors.New("test has no such endpoint")}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newBackend starts a TLS test server standing in for kube-apiserver and
// returns its address and a RoundTripper that trusts it; HTTP/2 unless h1.
func newBackend(t testing.TB, h http.Handler, h1 bool) (string, http.RoundTripper) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = !h1
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), srv.Client().Transport
}

// startProxy runs a Server with cfg (on a free port unless it names one)
// in front of a proxy.Handler over p and u, counting into m (nil:
// unregistered), and stops it when the test ends, then checks that p saw
// every Done once.
func startProxy(t *testing.T, cfg Config, p *fakePicker, u proxy.Upstream, m *Metrics) (*Server, *proxy.Handler, string) {
	t.Helper()
	if cfg.ListenAddress == "" {
		cfg.ListenAddress = "127.0.0.1:0"
	}
	h := proxy.New(proxy.Config{}, p, u, nil)
	s := New(cfg, h, m)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		p.checkDoneOnce(t)
	})
	return s, h, "http://" + s.Addr().String()
}

// newClient is testkit.NewClient: client-go pointed at http://127.0.0.1:7080.
func newClient(t *testing.T, h2c bool) *http.Client { return testkit.NewClient(t, h2c) }

// readStatus is testkit.ReadStatus.
func readStatus(t *testing.T, resp *http.Response) metav1.Status { return testkit.ReadStatus(t, resp) }

// wait is testkit.Wait.
func wait(t testing.TB, ch <-chan struct{}, what string) { testkit.Wait(t, ch, what) }

// forEachH1Server runs f as a subtest per server of plaintext HTTP/1.1
// (Config.H1Server): the tests of what a client sees hold for both.
// Tests of what only internal/h1server adds run with it alone.
func forEachH1Server(t *testing.T, f func(t *testing.T, h1 string)) {
	for _, h1 := range []string{H1ServerOwn, H1ServerStd} {
		t.Run("h1-server="+h1, func(t *testing.T) { f(t, h1) })
	}
}
