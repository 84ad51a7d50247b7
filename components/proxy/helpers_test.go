package proxy

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/internal/testkit"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
)

func TestMain(m *testing.M) {
	// RequestInfoFactory logs unparsable queries through klog; the fuzz
	// corpus is full of them.
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	goleak.VerifyTestMain(m)
}

// waitLimit bounds every wait in these tests. It is a failure bound for
// hangs, not a speed target: passing tests never come near it.
const waitLimit = 30 * time.Second

// fakePicker picks the first endpoint that is not avoided, like a balancer
// with one obvious choice, and records every pick and every Done.
type fakePicker struct {
	mu    sync.Mutex
	eps   []*balancer.Endpoint
	err   error
	picks []pickRecord
}

type pickRecord struct {
	info  balancer.PickInfo
	addr  string
	dones []balancer.DoneInfo
}

func newFakePicker(addrs ...string) *fakePicker {
	p := &fakePicker{}
	for _, a := range addrs {
		p.eps = append(p.eps, balancer.NewEndpoint(a))
	}
	return p
}

func (p *fakePicker) Pick(info balancer.PickInfo) (balancer.Pick, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return balancer.Pick{}, p.err
	}
	if len(p.eps) == 0 {
		return balancer.Pick{}, balancer.ErrNoEndpoints
	}
	ep := p.eps[0]
	moved := false
	for _, e := range p.eps {
		if e.Address() != info.Avoid {
			ep, moved = e, true
			break
		}
	}
	if info.Unloaded && !moved {
		return balancer.Pick{}, balancer.ErrNoAlternative
	}
	if info.Served {
		// As the balancer with no routing table: no endpoint is known to
		// serve the path.
		return balancer.Pick{}, balancer.ErrNoAlternative
	}
	if info.Only != "" {
		i := slices.IndexFunc(p.eps, func(e *balancer.Endpoint) bool { return e.Address() == info.Only })
		if i < 0 {
			return balancer.Pick{}, balancer.ErrNoAlternative
		}
		ep = p.eps[i]
	}
	i := len(p.picks)
	p.picks = append(p.picks, pickRecord{info: info, addr: ep.Address()})
	return balancer.NewPick(ep, func(di balancer.DoneInfo) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.picks[i].dones = append(p.picks[i].dones, di)
	}), nil
}

func (p *fakePicker) records() []pickRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]pickRecord, len(p.picks))
	for i, r := range p.picks {
		r.dones = append([]balancer.DoneInfo(nil), r.dones...)
		out[i] = r
	}
	return out
}

// checkDoneOnce must run after the server stopped: by then every response
// body was closed, so every pick must have reported exactly once.
func (p *fakePicker) checkDoneOnce(t *testing.T) {
	t.Helper()
	for i, r := range p.records() {
		if len(r.dones) != 1 {
			t.Errorf("pick %d (%s): Done called %d times, want exactly 1", i, r.addr, len(r.dones))
		}
	}
}

// fakeUpstream maps addresses to RoundTrippers and records every For call.
type fakeUpstream struct {
	mu    sync.Mutex
	rts   map[string]http.RoundTripper
	calls []upstreamCall
}

type upstreamCall struct {
	addr string
	mode transport.AuthMode
}

func newFakeUpstream() *fakeUpstream { return &fakeUpstream{rts: map[string]http.RoundTripper{}} }

func (u *fakeUpstream) set(addr string, rt http.RoundTripper) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rts[addr] = rt
}

func (u *fakeUpstream) For(addr string, mode transport.AuthMode) http.RoundTripper {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, upstreamCall{addr, mode})
	if rt, ok := u.rts[addr]; ok {
		return rt
	}
	return roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, &transport.UnprocessedError{Endpoint: addr, Err: errors.New("test has no such endpoint")}
	})
}

func (u *fakeUpstream) callList() []upstreamCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamCall(nil), u.calls...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newBackend starts a TLS test server standing in for kube-apiserver and
// returns its address and a RoundTripper that trusts it. HTTP/2 unless
// h1 is set, which tests use to see headers an HTTP/2 transport would
// filter by itself.
func newBackend(t testing.TB, h http.Handler, h1 bool) (string, http.RoundTripper) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = !h1
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), srv.Client().Transport
}

// startProxy runs a Server for a Handler over p and u on a free port and
// stops it when the test ends, then checks that p saw every Done once.
func startProxy(t *testing.T, cfg Config, p *fakePicker, u Upstream, m *Metrics) (*listener.Server, *Handler, string) {
	t.Helper()
	return startProxyOn(t, listener.Config{}, nil, cfg, p, u, m)
}

// startProxyOn is startProxy behind a listener configured by lcfg (on a
// free port unless it names one), counting into lm (nil: unregistered).
func startProxyOn(t *testing.T, lcfg listener.Config, lm *listener.Metrics, cfg Config, p *fakePicker, u Upstream, m *Metrics) (*listener.Server, *Handler, string) {
	t.Helper()
	if lcfg.ListenAddress == "" {
		lcfg.ListenAddress = "127.0.0.1:0"
	}
	h := New(cfg, p, u, m)
	s := listener.New(lcfg, h, lm)
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

// cancelWatchProxy is a proxy before a backend that answers a watch with
// one event, then holds it until the request is canceled, which closes
// canceled: for tests of a client leaving.
type cancelWatchProxy struct {
	h        *Handler
	base     string
	p        *fakePicker
	m        *Metrics
	canceled chan struct{}
}

func startCancelWatchProxy(t *testing.T, cfg Config) cancelWatchProxy {
	t.Helper()
	return startCancelWatchProxyOn(t, listener.Config{}, cfg)
}

// startCancelWatchProxyOn is startCancelWatchProxy behind a listener
// configured by lcfg.
func startCancelWatchProxyOn(t *testing.T, lcfg listener.Config, cfg Config) cancelWatchProxy {
	t.Helper()
	canceled := make(chan struct{})
	addr, rt := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(canceled)
	}), false)
	p := newFakePicker(addr)
	u := newFakeUpstream()
	u.set(addr, rt)
	m, _ := NewMetrics(nil)
	_, h, base := startProxyOn(t, lcfg, nil, cfg, p, u, m)
	return cancelWatchProxy{h: h, base: base, p: p, m: m, canceled: canceled}
}

// listenerValue reads the listener's metric name (the series whose one
// label has value label; any series when label is ""), through a registry
// as /metrics would.
func listenerValue(t *testing.T, lm *listener.Metrics, name, label string) func() float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range lm.Collectors() {
		reg.MustRegister(c)
	}
	return func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
					continue
				}
				if g := m.GetGauge(); g != nil {
					return g.GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no series %s{%q}", name, label)
		return 0
	}
}

// okBackend is one backend that answers "ok", behind a picker and
// upstream that know only it.
func okBackend(t *testing.T) (*fakePicker, *fakeUpstream) {
	t.Helper()
	return backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
}

// backend is one HTTP/2 backend serving h, behind a picker and upstream
// that know only it.
func backend(t *testing.T, h http.Handler) (*fakePicker, *fakeUpstream) {
	t.Helper()
	addr, rt := newBackend(t, h, false)
	u := newFakeUpstream()
	u.set(addr, rt)
	return newFakePicker(addr), u
}

// rawRequest is testkit.RawRequest.
func rawRequest(t *testing.T, addr, raw string) *http.Response {
	return testkit.RawRequest(t, addr, raw)
}
