package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiserver is the kit's fake kube-apiserver serving ConfigMaps in
// "default" (get, list, watch); the kit answers /readyz, counts and
// records who asked.
type apiserver struct{ *testkit.APIServer }

func newAPIServer(t *testing.T, ca *testkit.CA) *apiserver {
	t.Helper()
	return &apiserver{testkit.NewAPIServer(t, ca, http.HandlerFunc(serveConfigMaps))}
}

func serveConfigMaps(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	const cm = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"default","resourceVersion":%q}}`
	switch {
	case r.URL.Path == "/api/v1/namespaces/default/configmaps" && r.URL.Query().Get("watch") == "true":
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// client-go's informers list through a watch (WatchList).
			fmt.Fprintf(w, `{"type":"ADDED","object":`+cm+"}\n", "from-list", "1")
			fmt.Fprint(w, `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
		}
		fmt.Fprintf(w, `{"type":"ADDED","object":`+cm+"}\n", "from-watch", "2")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/namespaces/default/configmaps":
		fmt.Fprintf(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`+cm+`]}`, "from-list", "1")
	case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/configmaps/"):
		fmt.Fprintf(w, cm, strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/default/configmaps/"), "1")
	default:
		http.NotFound(w, r)
	}
}

// seen counts the client certificate CNs ("" for none) and Authorization
// headers of the requests other than /readyz.
func (a *apiserver) seen() (cns, authz map[string]int) {
	cns, authz = map[string]int{}, map[string]int{}
	for _, r := range a.Seen() {
		if r.Method == http.MethodGet && r.Path == "/readyz" {
			continue
		}
		cns[r.CN]++
		authz[r.Authorization]++
	}
	return cns, authz
}

type fixture struct {
	servers   []*apiserver
	cfg       *rest.Config // the program's config: Host is the first server
	endpoints string       // all three, for WithEndpoints
	ca        *testkit.CA
	client    testkit.KeyPair
}

// newFixture starts three apiservers whose certificates are valid only
// for "kubernetes", and a config with a client certificate (files) that
// verifies that name.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca := testkit.NewCA(t)
	f := &fixture{ca: ca, client: ca.Client("system:library-test")}
	var urls []string
	for range 3 {
		s := newAPIServer(t, ca)
		f.servers = append(f.servers, s)
		urls = append(urls, s.URL)
	}
	f.endpoints = strings.Join(urls, ",")
	dir := t.TempDir()
	f.cfg = &rest.Config{
		Host: urls[0],
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: "kubernetes",
			CAFile:     testkit.WriteFile(t, dir, "ca.crt", ca.CertPEM),
			CertFile:   testkit.WriteFile(t, dir, "client.crt", f.client.CertPEM),
			KeyFile:    testkit.WriteFile(t, dir, "client.key", f.client.KeyPEM),
		},
		QPS: -1, // no client-side rate limit: the tests send bursts
	}
	return f
}

func (f *fixture) counts() []int64 {
	out := make([]int64, len(f.servers))
	for i, s := range f.servers {
		out[i] = s.Requests.Load()
	}
	return out
}

func newBalancer(t *testing.T, cfg *rest.Config, opts ...Option) *Balancer {
	t.Helper()
	b, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestSpreadTypedAndDynamic: one typed clientset and one dynamic client,
// each built once from the wrapped config, spread their requests over the
// three apiservers, for both policies.
func TestSpreadTypedAndDynamic(t *testing.T) {
	for _, policy := range []string{balancer.PolicyLeastRequest, balancer.PolicyRoundRobin} {
		t.Run(policy, func(t *testing.T) {
			f := newFixture(t)
			cfg, closer, err := Wrap(f.cfg, WithEndpoints(f.endpoints), WithBalancerPolicy(policy), WithLogger(quiet()))
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			cs := kubernetes.NewForConfigOrDie(cfg)
			dyn := dynamic.NewForConfigOrDie(cfg)
			ctx := context.Background()
			const n = 150
			for i := range n {
				if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprint("typed-", i), metav1.GetOptions{}); err != nil {
					t.Fatalf("typed get %d: %v", i, err)
				}
				cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
				if _, err := dyn.Resource(cm).Namespace("default").Get(ctx, fmt.Sprint("dynamic-", i), metav1.GetOptions{}); err != nil {
					t.Fatalf("dynamic get %d: %v", i, err)
				}
			}
			counts := f.counts()
			t.Logf("%s: requests per apiserver %v", policy, counts)
			for i, c := range counts {
				if share := float64(c) / (2 * n); share < 0.2 || share > 0.47 {
					t.Errorf("apiserver %d served %.0f%% of the requests (%v), want about a third", i+1, 100*share, counts)
				}
			}
		})
	}
}

// TestCredentials: whatever form the config's credentials take, the
// apiserver sees them, and nothing else.
func TestCredentials(t *testing.T) {
	tests := []struct {
		name      string
		set       func(f *fixture, cfg *rest.Config, dir string)
		wantCN    string
		wantAuthz string
	}{
		{"certificate files", func(*fixture, *rest.Config, string) {}, "system:library-test", ""},
		{"certificate data", func(f *fixture, cfg *rest.Config, _ string) {
			cfg.CertFile, cfg.KeyFile, cfg.CAFile = "", "", ""
			cfg.CertData, cfg.KeyData, cfg.CAData = f.client.CertPEM, f.client.KeyPEM, f.ca.CertPEM
		}, "system:library-test", ""},
		{"token", func(_ *fixture, cfg *rest.Config, _ string) {
			cfg.CertFile, cfg.KeyFile = "", ""
			cfg.BearerToken = "secret-token"
		}, "", "Bearer secret-token"},
		{"token file wins over token", func(_ *fixture, cfg *rest.Config, dir string) {
			cfg.CertFile, cfg.KeyFile = "", ""
			cfg.BearerToken = "stale"
			cfg.BearerTokenFile = testkit.WriteFile(t, dir, "token", []byte("file-token\n"))
		}, "", "Bearer file-token"},
		{"certificate and token", func(_ *fixture, cfg *rest.Config, _ string) {
			cfg.BearerToken = "both"
		}, "system:library-test", "Bearer both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			cfg := rest.CopyConfig(f.cfg)
			tc.set(f, cfg, t.TempDir())
			wrapped, closer, err := Wrap(cfg, WithEndpoints(f.endpoints), WithLogger(quiet()))
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			if wrapped.BearerToken != "" || wrapped.BearerTokenFile != "" || !reflect.DeepEqual(wrapped.TLSClientConfig, rest.TLSClientConfig{}) {
				t.Errorf("wrapped config keeps credentials client-go would apply itself: %+v", wrapped.TLSClientConfig)
			}
			cs := kubernetes.NewForConfigOrDie(wrapped)
			for i := range 6 {
				if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), fmt.Sprint(i), metav1.GetOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range f.servers {
				cns, authz := s.seen()
				for cn := range cns {
					if cn != tc.wantCN {
						t.Errorf("apiserver %d saw client certificate CN %q, want %q", i+1, cn, tc.wantCN)
					}
				}
				for a := range authz {
					if a != tc.wantAuthz {
						t.Errorf("apiserver %d saw Authorization %q, want %q", i+1, a, tc.wantAuthz)
					}
				}
			}
		})
	}
}

// TestInformerAndWatch: an informer lists and then watches through the
// library; Close ends the open watch cleanly.
func TestInformerAndWatch(t *testing.T) {
	f := newFixture(t)
	b := newBalancer(t, f.cfg, WithEndpoints(f.endpoints), WithLogger(quiet()))
	cs := kubernetes.NewForConfigOrDie(b.Config())

	w, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != "from-watch" {
			t.Fatalf("first watch event = %v %#v, want ADDED from-watch", ev.Type, ev.Object)
		}
	case <-time.After(testkit.WaitLimit):
		t.Fatal("no watch event")
	}
	if open := totalLong(b); open != 1 {
		t.Errorf("balancer counts %d open long-running requests during the watch, want 1", open)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(stopAfter(stop, testkit.WaitLimit), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	deadline := time.Now().Add(testkit.WaitLimit)
	for len(inf.GetStore().ListKeys()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if keys := inf.GetStore().ListKeys(); len(keys) != 2 {
		t.Errorf("informer store = %v, want default/from-list and default/from-watch", keys)
	}
	close(stop)
	factory.Shutdown()

	// Close ends the watch as if the apiserver had: the channel closes.
	b.Close()
	select {
	case _, open := <-w.ResultChan():
		for open {
			_, open = <-w.ResultChan()
		}
	case <-time.After(testkit.WaitLimit):
		t.Fatal("Close left the watch open")
	}
	w.Stop()
}

// TestRetriesUnprocessed: one endpoint refuses connections. Every request
// succeeds anyway: the transport reports the refusal as unprocessed and the
// forwarder retries elsewhere; the retry is counted on the caller's
// registry.
func TestRetriesUnprocessed(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	reg := prometheus.NewRegistry()
	// Round robin, no probes: the dead endpoint keeps being picked until
	// the balancer ejects it, so the first request meets it.
	b := newBalancer(t, f.cfg, WithEndpoints("https://"+dead+","+f.servers[0].URL),
		WithRegisterer(reg), WithProbeInterval(0), WithBalancerPolicy(balancer.PolicyRoundRobin), WithLogger(quiet()))
	cs := kubernetes.NewForConfigOrDie(b.Config())
	for i := range 10 {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), fmt.Sprint(i), metav1.GetOptions{}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := f.servers[0].Requests.Load(); got != 10 {
		t.Errorf("the live apiserver served %d requests, want 10", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	retries := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "fanout_retries_total" {
			for _, m := range mf.GetMetric() {
				retries += m.GetCounter().GetValue()
			}
		}
	}
	if retries < 1 {
		t.Errorf("fanout_retries_total = %v, want at least 1", retries)
	}
}

// TestMetricsRegistration: nothing is registered without WithRegisterer;
// with it the sidecar's series appear, and Close unregisters them so a new
// Balancer can use the same registry.
func TestMetricsRegistration(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	for round := range 2 {
		b, err := New(f.cfg, WithEndpoints(f.endpoints), WithRegisterer(reg), WithLogger(quiet()))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		cs := kubernetes.NewForConfigOrDie(b.Config())
		if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), "x", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"fanout_requests_total", "fanout_endpoint_inflight_requests", "fanout_upstream_dials_total", "fanout_endpoint_probe_ready"} {
			if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
				t.Errorf("round %d: %s has %d series (%v), want some", round, name, n, err)
			}
		}
		b.Close()
		if n, _ := testutil.GatherAndCount(reg); n != 0 {
			t.Errorf("round %d: %d series left after Close, want 0", round, n)
		}
	}
}

// TestRefusedConfigs: configs fanout cannot honour fail at New with a
// reason, and start nothing.
func TestRefusedConfigs(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		edit func(*rest.Config)
		want string
	}{
		{"nil-safe exec plugin", func(c *rest.Config) {
			c.ExecProvider = &clientcmdapi.ExecConfig{Command: "aws"}
		}, "exec credential plugins"},
		{"auth provider", func(c *rest.Config) {
			c.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}, `auth provider "oidc"`},
		{"basic auth", func(c *rest.Config) { c.Username, c.Password = "u", "p" }, "basic authentication"},
		{"insecure", func(c *rest.Config) { c.Insecure = true }, "Insecure"},
		{"own transport", func(c *rest.Config) { c.Transport = http.DefaultTransport }, "already has a Transport"},
		{"plain http", func(c *rest.Config) { c.Host = "http://127.0.0.1:8080" }, "is not https://"},
		{"path prefix", func(c *rest.Config) { c.Host += "/prefix" }, "is not https://"},
		{"no credentials", func(c *rest.Config) { c.CertFile, c.KeyFile = "", "" }, "no credentials"},
		{"certificate without key", func(c *rest.Config) { c.KeyFile = "" }, "without a key"},
		{"unreadable key", func(c *rest.Config) { c.KeyFile = "/nonexistent/key" }, "client-key"},
		{"bad endpoints", func(*rest.Config) {}, "WithEndpoints"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rest.CopyConfig(f.cfg)
			tc.edit(cfg)
			endpoints := f.endpoints
			if tc.name == "bad endpoints" {
				endpoints = "dns://server/name"
			}
			b, err := New(cfg, WithEndpoints(endpoints), WithLogger(quiet()))
			if err == nil {
				b.Close()
				t.Fatalf("New succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestCloseLeaksNothing: a Balancer that served requests, watches and
// probes leaves no goroutine behind, and refuses requests after Close.
func TestCloseLeaksNothing(t *testing.T) {
	f := newFixture(t)
	before := goleak.IgnoreCurrent()
	b, err := New(f.cfg, WithEndpoints(f.endpoints), WithProbeInterval(50*time.Millisecond), WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(b.Config())
	for i := range 9 {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), fmt.Sprint(i), metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-w.ResultChan()
	// A few probe rounds on every endpoint, so that Close has probe
	// loops and their connections to end.
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range f.servers {
		start := s.Probes.Load()
		for s.Probes.Load() < start+3 {
			if time.Now().After(deadline) {
				t.Fatalf("%s was probed %d times, want 3 rounds", s.URL, s.Probes.Load()-start)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.Close()
	b.Close() // idempotent
	for range w.ResultChan() {
	}
	w.Stop()
	if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), "after", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("request after Close: %v, want an error saying the transport is closed", err)
	}
	goleak.VerifyNone(t, before)
}

func totalLong(b *Balancer) int64 {
	var n int64
	for _, e := range b.Endpoints() {
		n += e.InflightLong
	}
	return n
}

// stopAfter returns a channel closed when stop closes or after d.
func stopAfter(stop <-chan struct{}, d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		select {
		case <-stop:
		case <-time.After(d):
		}
	}()
	return ch
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
