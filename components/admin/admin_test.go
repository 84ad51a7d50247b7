package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/components/balancer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeState struct {
	ready atomic.Bool
	eps   []balancer.EndpointStatus
}

func (f *fakeState) Ready() bool                          { return f.ready.Load() }
func (f *fakeState) Endpoints() []balancer.EndpointStatus { return f.eps }

func newTestHandler(t *testing.T) (*fakeState, http.Handler) {
	t.Helper()
	st := &fakeState{eps: []balancer.EndpointStatus{
		{Address: "10.0.0.11:6443", State: "ready", InflightShort: 2, InflightLong: 7, RequestsTotal: 42},
		{Address: "10.0.0.12:6443", State: "ejected", ErrorsTotal: 3, ConsecutiveFailures: 3},
	}}
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "fanout_test_total", Help: "test"})
	c.Add(3)
	reg.MustRegister(c)
	return st, NewHandler(st, reg, nil)
}

type fakeResolver struct {
	healthy bool
	detail  string
}

func (f fakeResolver) Status() (bool, string) { return f.healthy, f.detail }

// TestReadyzResolverDetail: a failing resolver shows in the /readyz body
// of loopback clients but never changes the status code, since the last
// good endpoints stay in use. Clients on the pod network get the same
// status line without the detail, which quotes raw resolver errors.
func TestReadyzResolverDetail(t *testing.T) {
	const detail = "resolver endpointslice: last error 12s ago: connection refused; serving the last known 3 endpoints"
	tests := []struct {
		name     string
		ready    bool
		resolver ResolverStatus
		wantCode int
		wantBody string
	}{
		{"no resolver status", true, nil, 200, "ok\n"},
		{"healthy resolver", true, fakeResolver{healthy: true}, 200, "ok\n"},
		{"failing resolver, still ready", true, fakeResolver{detail: detail}, 200, "ok\n" + detail + "\n"},
		{"failing resolver, not ready", false, fakeResolver{detail: detail}, 503, "no usable kube-apiserver endpoint\n" + detail + "\n"},
		{"healthy resolver, not ready", false, fakeResolver{healthy: true}, 503, "no usable kube-apiserver endpoint\n"},
	}
	for _, tt := range tests {
		for _, remote := range []string{"127.0.0.1:5555", "[::1]:5555", "10.1.1.1:5555", "[fd00::1]:5555"} {
			t.Run(tt.name+" from "+remote, func(t *testing.T) {
				st := &fakeState{}
				st.ready.Store(tt.ready)
				h := NewHandler(st, prometheus.NewRegistry(), tt.resolver)
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
				req.RemoteAddr = remote
				h.ServeHTTP(rec, req)
				want := tt.wantBody
				if !strings.HasPrefix(remote, "127.") && !strings.HasPrefix(remote, "[::1]") {
					want, _, _ = strings.Cut(want, "\n")
					want += "\n"
				}
				if rec.Code != tt.wantCode || rec.Body.String() != want {
					t.Fatalf("GET /readyz from %s = %d %q, want %d %q", remote, rec.Code, rec.Body.String(), tt.wantCode, want)
				}
			})
		}
	}
}

func TestHandler(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		remote     string
		ready      bool
		wantCode   int
		wantSubstr string
	}{
		{"healthz ok even when not ready", "/healthz", "10.1.1.1:5555", false, 200, "ok"},
		{"readyz not ready", "/readyz", "10.1.1.1:5555", false, 503, "no usable kube-apiserver endpoint"},
		{"readyz ready", "/readyz", "10.1.1.1:5555", true, 200, "ok"},
		{"metrics", "/metrics", "10.1.1.1:5555", true, 200, "fanout_test_total 3"},
		{"debug from loopback", "/debug/endpoints", "127.0.0.1:5555", true, 200, `"inflight_long": 7`},
		{"debug from ipv6 loopback", "/debug/endpoints", "[::1]:5555", true, 200, `"10.0.0.12:6443"`},
		{"debug from pod network refused", "/debug/endpoints", "10.1.1.1:5555", true, 403, "loopback clients only"},
		{"unknown path", "/proxy/api", "127.0.0.1:5555", true, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, h := newTestHandler(t)
			st.ready.Store(tt.ready)
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			req.RemoteAddr = tt.remote
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("GET %s from %s = %d, want %d (body %q)", tt.path, tt.remote, rec.Code, tt.wantCode, rec.Body.String())
			}
			if !strings.Contains(rec.Body.String(), tt.wantSubstr) {
				t.Fatalf("GET %s body = %q, want it to contain %q", tt.path, rec.Body.String(), tt.wantSubstr)
			}
		})
	}
}

func TestDebugEndpointsJSON(t *testing.T) {
	st, h := newTestHandler(t)
	st.ready.Store(true)
	req := httptest.NewRequest(http.MethodGet, "/debug/endpoints", nil)
	req.RemoteAddr = "127.0.0.1:1"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var got struct {
		Ready     bool                      `json:"ready"`
		Endpoints []balancer.EndpointStatus `json:"endpoints"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode: %v; body %s", err, rec.Body.String())
	}
	if !got.Ready || len(got.Endpoints) != 2 || got.Endpoints[1].State != "ejected" || got.Endpoints[0].InflightShort != 2 {
		t.Fatalf("unexpected debug payload: %+v", got)
	}
}

func TestModuleServes(t *testing.T) {
	st := &fakeState{}
	var srv *Server
	reg := prometheus.NewRegistry()
	app := fxtest.New(t, Module,
		fx.Supply(Config{ListenAddress: "127.0.0.1:0"}, slog.New(slog.DiscardHandler)),
		fx.Provide(
			func() State { return st },
			func() prometheus.Gatherer { return reg },
			func() prometheus.Registerer { return reg },
		),
		fx.Populate(&srv),
	)
	app.RequireStart()
	// Its own transport, closed before Stop: a connection it dialed and
	// left unused would hold Shutdown for 5 s (net/http's rule for new
	// connections).
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	resp, err := client.Get("http://" + srv.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz with no endpoints = %d, want 503", resp.StatusCode)
	}
	// The server's own counter is exported from the start, at 0.
	resp, err = client.Get("http://" + srv.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "\nfanout_admin_connections_evicted_total 0\n") {
		t.Fatalf("/metrics lacks fanout_admin_connections_evicted_total 0:\n%s", b)
	}
	tr.CloseIdleConnections()
	app.RequireStop()
}

func TestServerLifecycle(t *testing.T) {
	st := &fakeState{}
	st.ready.Store(true)
	s := NewServer(Config{ListenAddress: "127.0.0.1:0"}, NewHandler(st, prometheus.NewRegistry(), nil), nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("readyz = %d %q", resp.StatusCode, body)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.Addr().String() + "/readyz"); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

func TestPprofLoopbackOnly(t *testing.T) {
	_, inner := newTestHandler(t)
	for _, tc := range []struct {
		name   string
		h      http.Handler
		remote string
		path   string
		want   int
	}{
		{"off", inner, "127.0.0.1:4000", "/debug/pprof/", http.StatusNotFound},
		{"loopback", WithPprof(inner), "127.0.0.1:4000", "/debug/pprof/", http.StatusOK},
		{"IPv6 loopback", WithPprof(inner), "[::1]:4000", "/debug/pprof/cmdline", http.StatusOK},
		{"pod network", WithPprof(inner), "10.1.2.3:4000", "/debug/pprof/", http.StatusForbidden},
		{"pod network, heap", WithPprof(inner), "10.1.2.3:4000", "/debug/pprof/heap", http.StatusForbidden},
		{"pod network, no slash", WithPprof(inner), "10.1.2.3:4000", "/debug/pprof", http.StatusForbidden},
		{"other paths pass", WithPprof(inner), "10.1.2.3:4000", "/healthz", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s from %s: %d, want %d", tc.path, tc.remote, rec.Code, tc.want)
			}
		})
	}
}
