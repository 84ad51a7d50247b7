package engine

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiserver is testkit's stand-in for kube-apiserver that also counts
// upgrades, which it answers as kube-apiserver's exec does.
type apiserver struct {
	*testkit.APIServer
	upgrades atomic.Int64
}

// testConfig returns Defaults for two apiservers whose certificates are
// valid for "kubernetes" only.
func testConfig(t *testing.T) (Config, []*apiserver) {
	t.Helper()
	ca := testkit.NewCA(t)
	client := ca.Client("system:engine-test")
	var servers []*apiserver
	var eps []string
	for range 2 {
		a := &apiserver{}
		a.APIServer = testkit.NewAPIServer(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "" {
				// kube-apiserver's exec: 101, then the connection is the
				// stream's.
				a.upgrades.Add(1)
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				defer conn.Close()
				fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
				_ = brw.Flush()
				return
			}
			fmt.Fprint(w, "ok")
		}), testkit.WithClientAuth(tls.NoClientCert))
		servers = append(servers, a)
		eps = append(eps, a.URL)
	}
	server, err := url.Parse(eps[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.Upstream = &certs.Upstream{
		Server: server, ServerName: "kubernetes",
		CA:         certs.Source{Data: ca.CertPEM},
		ClientCert: certs.Source{Data: client.CertPEM},
		ClientKey:  certs.Source{Data: client.KeyPEM},
	}
	cfg.Endpoints = strings.Join(eps, ",")
	cfg.Probe.Interval = 50 * time.Millisecond
	return cfg, servers
}

// TestLifecycle: New builds every part and starts nothing; Start runs
// them and the first snapshot reaches the balancer; requests go through
// Handler and RoundTripper; Stop ends everything (goleak checks), refuses
// later requests, unregisters every metric and is idempotent; an engine
// does not start again.
func TestLifecycle(t *testing.T) {
	cfg, servers := testConfig(t)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{PartCredentials, PartBalancer, PartTransports, PartProxy, PartProbeTransports, PartProber, PartDiscoverer, PartWatchRebalancer, PartResolver, PartStateLog}
	if got := e.Parts(); !reflect.DeepEqual(got, want[:len(want)-2]) {
		t.Errorf("before Start, Parts() = %v, want %v", got, want[:len(want)-2])
	}
	if n := len(e.Endpoints()); n != 0 {
		t.Errorf("New published %d endpoints before Start", n)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	if got := e.Parts(); !reflect.DeepEqual(got, want) {
		t.Errorf("after Start, Parts() = %v, want %v", got, want)
	}
	select {
	case <-e.Resolved():
	case <-time.After(10 * time.Second):
		t.Fatal("no endpoint snapshot 10s after Start")
	}
	if n := len(e.Endpoints()); n != 2 || !e.Ready() {
		t.Errorf("after the first snapshot: %d endpoints, ready %v; want 2 and ready", n, e.Ready())
	}
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/api/v1/namespaces/default/configmaps/x", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("Handler: status %d, want 200", rec.Code)
	}
	resp, err := e.RoundTripper().RoundTrip(httptest.NewRequest(http.MethodGet, "https://ignored/api/v1/namespaces/default/configmaps/x", nil).WithContext(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := servers[0].Requests.Load() + servers[1].Requests.Load(); got != 2 {
		t.Errorf("the apiservers got %d requests, want 2", got)
	}
	for _, s := range servers {
		for deadline := time.Now().Add(10 * time.Second); s.Probes.Load() == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never probed", s.URL)
			}
		}
	}
	if n, _ := testutil.GatherAndCount(reg, "fanout_requests_total", "fanout_endpoint_probe_ready", "fanout_watch_rebalanced_total", "fanout_resolver_endpoints"); n == 0 {
		t.Error("no fanout_* series registered")
	}

	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
	if _, err := e.RoundTripper().RoundTrip(httptest.NewRequest(http.MethodGet, "https://ignored/api/v1/pods", nil).WithContext(context.Background())); !errors.Is(err, proxy.ErrStopped) {
		t.Errorf("a request after Stop: %v, want proxy.ErrStopped", err)
	}
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Errorf("%d series left registered after Stop, want 0", n)
	}
	if err := e.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// TestProbesHaveTheirOwnPools: the prober must not share fate with
// client traffic, so it gets a pool set of its own, fed the same
// snapshots.
func TestProbesHaveTheirOwnPools(t *testing.T) {
	cfg, _ := testConfig(t)
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(context.Background())
	if e.probes == nil || e.probes == e.transports {
		t.Fatalf("the prober's pools are %p, the requests' %p: want a set of its own", e.probes, e.transports)
	}
	sinks, pools := e.sinks()
	wantSinks := []endpointSink{e.balancer, e.prober, e.discoverer, e.resolved}
	if !reflect.DeepEqual(sinks, wantSinks) {
		t.Errorf("snapshots go to %T, want the balancer, then the prober, then the discoverer, then the resolver metrics", sinks)
	}
	if len(pools) != 3 || pools[0] != e.transports || pools[1] != e.probes || pools[2] != e.proxyMetrics {
		t.Errorf("snapshots prune pools %v, want the requests', the probes' and the proxy's per-endpoint series", pools)
	}

	cfg.Probe.Interval, cfg.WatchRebalance = 0, false
	discovery, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer discovery.Stop(context.Background())
	if got, want := discovery.Parts(), []string{PartCredentials, PartBalancer, PartTransports, PartProxy, PartProbeTransports, PartDiscoverer}; !reflect.DeepEqual(got, want) {
		t.Errorf("with probing and rebalancing off, Parts() = %v, want %v: discovery reads ride the probes' pools", got, want)
	}
	cfg.SkewRouting = false
	off, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Stop(context.Background())
	if got, want := off.Parts(), []string{PartCredentials, PartBalancer, PartTransports, PartProxy}; !reflect.DeepEqual(got, want) {
		t.Errorf("with probing, rebalancing and skew routing off, Parts() = %v, want %v", got, want)
	}
}

// TestNewFailsCleanly: a Config that cannot work fails in New with the
// reason, and leaves nothing registered or running.
func TestNewFailsCleanly(t *testing.T) {
	cfg, _ := testConfig(t)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	cfg.Endpoints = "dns://server/name"
	_, err := New(cfg)
	if _, ok := errors.AsType[*EndpointsError](err); !ok {
		t.Errorf("New with bad endpoints: %v, want an *EndpointsError", err)
	}
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Errorf("%d series left registered after a failed New, want 0", n)
	}
	c, _ := testConfig(t)
	c.Upstream = nil
	if _, err := New(c); err == nil || !strings.Contains(err.Error(), "Upstream") {
		t.Errorf("New without an upstream: %v, want an error mentioning Upstream", err)
	}
}

// TestValidate: Validate is the one check of the settings (New trusts a
// Config that passed it), and names the flag that sets each value.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative probe interval", func(c *Config) { c.Probe.Interval = -time.Second }, "use 0 to turn probing off"},
		{"rebalancing at rate 0", func(c *Config) { c.Rebalance.Rate = 0 }, "--watch-rebalance=false"},
		{"unknown policy", func(c *Config) { c.Balancer.Policy = "random" }, "random"},
		{"retry budget above 1", func(c *Config) { c.Proxy.RetryBudget = &proxy.RetryBudget{Ratio: 2, Min: 1, Window: time.Second} }, "--retry-budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := testConfig(t)
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if c, _ := testConfig(t); c.Validate() != nil {
		t.Errorf("Validate of the defaults: %v", c.Validate())
	}
}

// TestStateLogRuns: the state log compares the balancer's snapshots on
// its own, every interval, until its context ends, and
// logs an ejection it sees. Nothing in it touches the network, so it runs
// in a synctest bubble, where the interval passes at once.
func TestStateLogRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &fakeStates{}
		st.set([]balancer.EndpointStatus{{Address: "a:1", State: balancer.StateReady}})
		lines := make(chan string, 10)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			logEndpointStates(ctx, st, slog.New(lineHandler{lines}), stateLogInterval)
		}()
		synctest.Wait() // the loop took its first snapshot and waits for a tick
		st.set([]balancer.EndpointStatus{{Address: "a:1", State: balancer.StateEjected, EjectedUntil: "T1"}})
		time.Sleep(stateLogInterval)
		synctest.Wait() // the tick was handled
		select {
		case l := <-lines:
			if !strings.Contains(l, "endpoint ejected") {
				t.Errorf("logged %q, want the ejection", l)
			}
		default:
			t.Fatalf("the ejection was not logged after one interval (%s)", stateLogInterval)
		}
		cancel()
		<-done
	})
}

type fakeStates struct {
	v atomic.Pointer[[]balancer.EndpointStatus]
}

func (f *fakeStates) set(s []balancer.EndpointStatus) { f.v.Store(&s) }

func (f *fakeStates) Endpoints() []balancer.EndpointStatus { return *f.v.Load() }

// lineHandler sends each record's message to a channel.
type lineHandler struct{ ch chan<- string }

func (h lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	h.ch <- r.Message
	return nil
}
func (h lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineHandler) WithGroup(string) slog.Handler      { return h }

// TestUpgradesAreDialed: the engine's handler hands exec, attach and
// port-forward to the transports' upgrade dialer. Without one the proxy
// answers 501, which is how a wiring slip would show.
func TestUpgradesAreDialed(t *testing.T) {
	cfg, servers := testConfig(t)
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	<-e.Resolved()
	front := httptest.NewServer(e.Handler())
	t.Cleanup(front.Close)
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /api/v1/namespaces/default/pods/p/exec?command=true HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("exec through the engine: status %d, want 101", resp.StatusCode)
	}
	if got := servers[0].upgrades.Load() + servers[1].upgrades.Load(); got != 1 {
		t.Errorf("the apiservers saw %d upgrades, want 1", got)
	}
}
