package health

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/resolver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clientCertRequired makes a testkit.APIServer require the sidecar's
// client certificate, as system:public-info-viewer effectively does.
var clientCertRequired = testkit.WithClientAuth(tls.RequireAndVerifyClientCert)

// readyz is the /readyz status code for a server ready or not, with the
// not-ready code given (0 means 500).
func readyz(ready bool, notReady int) int {
	switch {
	case ready:
		return http.StatusOK
	case notReady == 0:
		return http.StatusInternalServerError
	}
	return notReady
}

type creds struct {
	ca     *testkit.CA
	client testkit.KeyPair
}

func (c creds) RootCAs() *x509.CertPool                      { return c.ca.Pool }
func (c creds) ClientCertificate() (*tls.Certificate, error) { return &c.client.TLS, nil }
func (c creds) Token() (string, error)                       { return "", nil }

// newTransports are the prober's transports, trusting ca and presenting a
// client certificate it issued.
func newTransports(t *testing.T, ca *testkit.CA) *transport.Transports {
	t.Helper()
	tr, err := transport.New(transport.Config{ServerName: "kubernetes"}, creds{ca: ca, client: ca.Client("probe-user")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// sink records every report and hands them to the test in order, per
// address.
type sink struct {
	mu    sync.Mutex
	calls map[string]chan bool
}

func newSink() *sink { return &sink{calls: map[string]chan bool{}} }

func (s *sink) queue(addr string) chan bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.calls[addr]
	if !ok {
		q = make(chan bool, 1000)
		s.calls[addr] = q
	}
	return q
}

func (s *sink) SetReady(addr string, ready bool) { s.queue(addr) <- ready }

// next waits up to 10s for the next report about addr, outside a bubble.
func (s *sink) next(t *testing.T, addr string) bool {
	t.Helper()
	select {
	case r := <-s.queue(addr):
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("no probe report for %s within 10s", addr)
		return false
	}
}

// reported returns the next report about addr in a bubble, once every
// goroutine is blocked: the report of a probe due by now. It fails if
// there is none.
func (s *sink) reported(t *testing.T, addr string) bool {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-s.queue(addr):
		return r
	default:
		t.Fatalf("no probe report for %s", addr)
		return false
	}
}

// readyzServer is an apiserver's /readyz on httptest's in-memory network,
// for tests in a synctest bubble (create it there): ready unless told
// otherwise, and failing as kube-apiserver's does. It serves the probes
// of one endpoint address.
type readyzServer struct {
	t      *testing.T
	addr   string
	srv    *httptest.Server
	code   atomic.Int32 // status code of /readyz
	probes atomic.Int64
}

func newReadyzServer(t *testing.T, addr string) *readyzServer {
	r := &readyzServer{t: t, addr: addr}
	r.code.Store(http.StatusOK)
	r.srv = httptest.NewTestServer(t, http.HandlerFunc(r.serve))
	r.srv.EnableHTTP2 = true
	return r
}

func (r *readyzServer) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet || req.URL.Path != "/readyz" || req.Host != r.addr {
		r.t.Errorf("the server of %s got %s %s for host %s, want GET /readyz for it", r.addr, req.Method, req.URL.Path, req.Host)
	}
	r.probes.Add(1)
	testkit.WriteReadyz(w, int(r.code.Load()))
}

// upstream sends the probes of each server's address to it.
func upstream(servers ...*readyzServer) Upstream {
	u := memUpstream{}
	for _, s := range servers {
		u[s.addr] = s.srv.Client().Transport
	}
	return u
}

type memUpstream map[string]http.RoundTripper

func (u memUpstream) For(addr string, _ transport.AuthMode) http.RoundTripper { return u[addr] }

func eps(addrs ...string) []resolver.Endpoint {
	out := make([]resolver.Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = resolver.Endpoint{Address: a}
	}
	return out
}

func newProber(t *testing.T, cfg Config, up Upstream, s Sink, logs *testkit.Buffer) *Prober {
	t.Helper()
	// Tests not about thresholds see every probe's result at once.
	if cfg.Rise == 0 {
		cfg.Rise = 1
	}
	if cfg.Fall == 0 {
		cfg.Fall = 1
	}
	var w = &testkit.Buffer{}
	if logs != nil {
		w = logs
	}
	p, err := New(cfg, up, s, slog.New(slog.NewTextHandler(w, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// probeLoops is the number of probe goroutines running.
func probeLoops(p *Prober) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes.Len()
}

// TestTransitions runs in a bubble: a probe every interval, each as the
// test sleeps through it.
func TestTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const addr = "10.0.0.1:6443"
		srv := newReadyzServer(t, addr)
		s := newSink()
		var logs testkit.Buffer
		p := newProber(t, Config{}, upstream(srv), s, &logs)
		p.Update(eps(addr))
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			serverReady bool
			status      int // not-ready status code
			want        bool
			wantLog     string // a transition logged by this probe
		}{
			{serverReady: true, want: true},
			{serverReady: false, want: false, wantLog: "endpoint not ready"},
			{serverReady: false, status: http.StatusForbidden, want: false},
			{serverReady: true, want: true, wantLog: "endpoint ready again"},
			{serverReady: true, want: true},
			{serverReady: false, status: http.StatusServiceUnavailable, want: false, wantLog: "endpoint not ready"},
		}
		notReady := 0
		for i, st := range steps {
			srv.code.Store(int32(readyz(st.serverReady, st.status)))
			before := strings.Count(logs.String(), "\n")
			if i > 0 {
				time.Sleep(DefaultInterval)
			}
			if got := s.reported(t, addr); got != st.want {
				t.Fatalf("step %d: reported ready=%v, want %v", i, got, st.want)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")[before:]
			if st.wantLog == "" && len(lines) > 0 && lines[0] != "" {
				t.Errorf("step %d: logged %q without a transition", i, lines)
			}
			if st.wantLog != "" && (len(lines) != 1 || !strings.Contains(lines[0], st.wantLog) || !strings.Contains(lines[0], "endpoint="+addr)) {
				t.Errorf("step %d: logged %q, want one line with %q and the endpoint", i, lines, st.wantLog)
			}
			if !st.want {
				notReady++
			}
			if got := testutil.ToFloat64(p.total.WithLabelValues(addr, "not_ready")); got != float64(notReady) {
				t.Errorf("step %d: not_ready probes = %v, want %d", i, got, notReady)
			}
			if got := testutil.ToFloat64(p.total.WithLabelValues(addr, "ready")); got != float64(i+1-notReady) {
				t.Errorf("step %d: ready probes = %v, want %d", i, got, i+1-notReady)
			}
			gauge := 0.0
			if st.want {
				gauge = 1
			}
			if got := testutil.ToFloat64(p.readyGV.WithLabelValues(addr)); got != gauge {
				t.Errorf("step %d: probe_ready gauge = %v, want %v", i, got, gauge)
			}
		}
		if !strings.Contains(logs.String(), "[-]shutdown failed") {
			t.Errorf("the failed /readyz checks are not in the log:\n%s", logs.String())
		}
	})
}

// TestProbeThroughTransports: a probe goes through the Upstream's pool,
// over HTTP/2 with the pool's client certificate, and the first one
// runs at once on Start.
func TestProbeThroughTransports(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := testkit.NewAPIServer(t, ca, nil, clientCertRequired)
	s := newSink()
	p := newProber(t, Config{}, newTransports(t, ca), s, nil)
	p.Update(eps(srv.Addr()))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !s.next(t, srv.Addr()) {
		t.Fatal("reported not ready, want ready")
	}
	seen := srv.Seen()
	if len(seen) == 0 {
		t.Fatal("the apiserver saw no request")
	}
	if r := seen[0]; r.Method != http.MethodGet || r.Path != "/readyz" || r.Proto != "HTTP/2.0" || r.CN != "probe-user" {
		t.Errorf("probe %s %s over %s as %q, want GET /readyz over HTTP/2.0 as \"probe-user\" through the transport pool", r.Method, r.Path, r.Proto, r.CN)
	}
}

func TestFailures(t *testing.T) {
	ca := testkit.NewCA(t)
	tests := []struct {
		name       string
		setup      func(*testkit.APIServer) string // returns the address to probe
		wantReason string
		// timeout is the probe timeout: short only where the case is the
		// timeout, so that a loaded machine cannot turn a 500 into one.
		timeout time.Duration
	}{
		{
			name:       "non-200",
			setup:      func(a *testkit.APIServer) string { a.SetReadyz(http.StatusInternalServerError); return a.Addr() },
			wantReason: "500 Internal Server Error",
			timeout:    10 * time.Second,
		},
		{
			name:       "timeout",
			setup:      func(a *testkit.APIServer) string { a.SetDelay(time.Minute); return a.Addr() },
			wantReason: "no answer within 50ms",
			timeout:    50 * time.Millisecond,
		},
		{
			name: "dial error",
			setup: func(a *testkit.APIServer) string {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := l.Addr().String()
				l.Close()
				return addr
			},
			wantReason: "GET /readyz",
			timeout:    10 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.setup(testkit.NewAPIServer(t, ca, nil, clientCertRequired))
			s := newSink()
			var logs testkit.Buffer
			p := newProber(t, Config{Timeout: tt.timeout}, newTransports(t, ca), s, &logs)
			p.Update(eps(addr))
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			if s.next(t, addr) {
				t.Fatal("reported ready, want not ready")
			}
			if l := logs.String(); !strings.Contains(l, tt.wantReason) {
				t.Errorf("log %q lacks the reason %q", l, tt.wantReason)
			}
		})
	}
}

// TestUpdate runs in a bubble: the probes tick as the test sleeps.
func TestUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := newReadyzServer(t, "10.0.0.1:6443"), newReadyzServer(t, "10.0.0.2:6443"), newReadyzServer(t, "10.0.0.3:6443")
		s := newSink()
		reg := prometheus.NewPedanticRegistry()
		p := newProber(t, Config{}, upstream(a, b, c), s, nil)
		for _, col := range p.Collectors() {
			reg.MustRegister(col)
		}
		// Before Start an update only records the set: it starts no probe
		// loop, which Update would have registered before returning.
		p.Update(eps(a.addr, b.addr))
		if n := probeLoops(p); n != 0 {
			t.Fatalf("%d probe loops started before Start, want none", n)
		}
		synctest.Wait()
		if n := a.probes.Load() + b.probes.Load(); n != 0 {
			t.Fatalf("%d probes before Start, want none", n)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		b.code.Store(http.StatusInternalServerError)
		s.reported(t, a.addr)
		if s.reported(t, b.addr) {
			t.Fatal("b reported ready")
		}

		// b goes, c comes: c is probed at once, without waiting for a tick.
		p.Update(eps(a.addr, c.addr))
		if !s.reported(t, c.addr) {
			t.Fatal("c reported not ready")
		}
		if n := probeLoops(p); n != 2 {
			t.Errorf("%d probe loops, want 2", n)
		}
		bProbes := b.probes.Load()
		for range 3 {
			time.Sleep(DefaultInterval)
			s.reported(t, a.addr)
			s.reported(t, c.addr)
		}
		if n := b.probes.Load(); n != bProbes {
			t.Errorf("removed endpoint probed %d more times", n-bProbes)
		}
		if n, err := testutil.GatherAndCount(reg, "fanout_endpoint_probe_ready"); err != nil || n != 2 {
			t.Errorf("probe_ready series = %d (%v), want 2: the removed endpoint's must go", n, err)
		}
		want := fmt.Sprintf(`
# HELP fanout_endpoint_probe_ready 1 if the endpoint's last readiness probe passed (or it has not been probed yet), 0 if it failed.
# TYPE fanout_endpoint_probe_ready gauge
fanout_endpoint_probe_ready{endpoint=%q} 1
fanout_endpoint_probe_ready{endpoint=%q} 1
`, a.addr, c.addr)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fanout_endpoint_probe_ready"); err != nil {
			t.Error(err)
		}

		// After Stop nothing runs, and an update starts nothing.
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		p.Update(eps(a.addr, b.addr, c.addr))
		if n := probeLoops(p); n != 0 {
			t.Errorf("%d probe loops after Stop, want none", n)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero", cfg: Config{}},
		{name: "set", cfg: Config{Interval: time.Second, Timeout: time.Second}},
		{name: "negative interval", cfg: Config{Interval: -time.Second}, wantErr: "--probe-interval must not be negative"},
		{name: "negative timeout", cfg: Config{Timeout: -time.Second}, wantErr: "timeout must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if d := (Config{Interval: 300 * time.Millisecond}).withDefaults(); d.Timeout != 300*time.Millisecond {
		t.Errorf("timeout = %s, want it capped at the interval", d.Timeout)
	}
	if d := (Config{}).withDefaults(); d.Interval != DefaultInterval || d.Timeout != DefaultTimeout {
		t.Errorf("defaults = %s/%s, want %s/%s", d.Interval, d.Timeout, DefaultInterval, DefaultTimeout)
	}
}

// TestRiseFall runs in a bubble: a probe every interval, each as the
// test sleeps through it.
func TestRiseFall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const addr = "10.0.0.1:6443"
		srv := newReadyzServer(t, addr)
		s := newSink()
		p := newProber(t, Config{Rise: 2, Fall: 3}, upstream(srv), s, nil)
		p.Update(eps(addr))
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			serverReady bool
			want        bool
		}{
			{true, true},
			{false, true}, {false, true}, {false, false}, // fall after 3
			{true, false}, {false, false}, {true, false}, {true, true}, // rise after 2 in a row
			{false, true}, {true, true}, {false, true}, {false, true}, {false, false},
		}
		for i, st := range steps {
			srv.code.Store(int32(readyz(st.serverReady, 0)))
			if i > 0 {
				time.Sleep(DefaultInterval)
			}
			if got := s.reported(t, addr); got != st.want {
				t.Fatalf("step %d (server ready %v): reported ready=%v, want %v", i, st.serverReady, got, st.want)
			}
		}
	})
}
