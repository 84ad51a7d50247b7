package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/sidecar"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestSidecarResilienceDefaults: the library balances with the sidecar's
// defaults (balancer.Recommended), not with the more permissive zero
// Config: ejections capped at a third of the endpoints, slow start on,
// zone placement off with a minimum of 2 local endpoints.
func TestSidecarResilienceDefaults(t *testing.T) {
	f := newFixture(t)
	for _, policy := range []string{balancer.PolicyLeastRequest, balancer.PolicyRoundRobin} {
		t.Run(policy, func(t *testing.T) {
			o := defaults()
			WithBalancerPolicy(policy)(&o)
			c, err := engineConfig(f.cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			want := balancer.Config{Policy: policy, MaxEjectedFraction: 1.0 / 3, ConsecutiveFailures: 5, SlowStart: 10 * time.Second,
				ZonePolicy: balancer.ZonePolicyOff, ZoneMinEndpoints: 2}
			if !reflect.DeepEqual(c.Balancer, want) || !reflect.DeepEqual(c.Balancer, balancer.Recommended(policy)) {
				t.Errorf("balancer config %+v, want %+v (balancer.Recommended)", c.Balancer, want)
			}
		})
	}
}

// kubeconfigFor writes a kubeconfig with the fixture's server, CA and
// client key pair, for the sidecar's --kubeconfig; clientcmd reads it into
// the library's rest.Config, so both start from the same identity.
func kubeconfigFor(t *testing.T, f *fixture) string {
	t.Helper()
	tc := f.cfg.TLSClientConfig
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: %q, tls-server-name: %q}
users:
- name: u
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`, f.cfg.Host, tc.CAFile, tc.ServerName, tc.CertFile, tc.KeyFile)
	return testkit.WriteFile(t, t.TempDir(), "upstream.kubeconfig", []byte(kc))
}

// sidecarConfig is the engine Config the sidecar builds from its real
// flag set, parsed from args.
func sidecarConfig(t *testing.T, kubeconfig string, args []string) (sidecar.Config, engine.Config) {
	t.Helper()
	o := sidecar.NewConfig()
	fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
	o.AddFlags(fs)
	args = append([]string{"--kubeconfig", kubeconfig, "--listen-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}, args...)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := sidecar.EngineConfig(*o, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return *o, c
}

// settings is c without what each caller supplies from its surroundings
// (logger, registry, clocks, discovery credentials, the kubeconfig file
// the sidecar also watches): what is left must not differ between the
// sidecar and the library.
func settings(c engine.Config) engine.Config {
	up := *c.Upstream
	up.Kubeconfig = ""
	c.Upstream = &up
	c.Discovery, c.Log, c.Registerer = nil, nil, nil
	c.Proxy.Log = nil
	return c
}

// TestSidecarAndLibraryRunTheSameEngine keeps the two composition roots
// from drifting apart: for the same apiserver identity, the sidecar's
// flags and the library's options that mean the same thing must give the
// same engine Config, and both must run the same parts. An empty command
// line and no options are the defaults of both. A flag registered with a
// default of its own, an option the library translates differently, or a
// part one of them runs and the other does not fails here.
func TestSidecarAndLibraryRunTheSameEngine(t *testing.T) {
	f := newFixture(t)
	kubeconfig := kubeconfigFor(t, f)
	libCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		opts  []Option
	}{
		{"defaults", nil, nil},
		{"endpoints", []string{"--endpoints", f.endpoints}, []Option{WithEndpoints(f.endpoints)}},
		{"round-robin", []string{"--balancer=round-robin"}, []Option{WithBalancerPolicy(balancer.PolicyRoundRobin)}},
		{"no probes", []string{"--probe-interval=0"}, []Option{WithProbeInterval(0)}},
		{"probe interval", []string{"--probe-interval=5s"}, []Option{WithProbeInterval(5 * time.Second)}},
		{"no watch rebalancing", []string{"--watch-rebalance=false"}, []Option{WithWatchRebalancing(false)}},
		{"endpoint header", []string{"--debug-endpoint-header"}, []Option{WithEndpointHeader(true)}},
		{"net/http's HTTP/2 client", []string{"--upstream-http2=std"}, []Option{WithUpstreamHTTP2(transport.ClientStd)}},
		{"zones", []string{"--zone=a", "--zone-policy=spill-over", "--zone-min-endpoints=1", "--endpoint-zones=127.0.0.0/8=a"},
			[]Option{WithZone("a", balancer.ZonePolicySpillOver), WithZoneMinEndpoints(1), WithEndpointZones("127.0.0.0/8=a")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, sidecarCfg := sidecarConfig(t, kubeconfig, tc.flags)
			lo := defaults()
			for _, opt := range tc.opts {
				opt(&lo)
			}
			library, err := engineConfig(libCfg, lo)
			if err != nil {
				t.Fatal(err)
			}
			if s, l := settings(sidecarCfg), settings(library); !reflect.DeepEqual(s, l) {
				t.Fatalf("the sidecar (%q) and the library build different engines:\nsidecar %s\nlibrary %s", tc.flags, describe(s), describe(l))
			}
			if tc.name != "defaults" && tc.name != "no watch rebalancing" && tc.name != "no probes" {
				return
			}
			// Built and started, both run the same parts with the same
			// configuration.
			var se *engine.Engine
			app := fxtest.New(t, sidecar.App(o, quiet()), fx.Populate(&se))
			app.RequireStart()
			defer app.RequireStop()
			b := newBalancer(t, libCfg, append(tc.opts, WithLogger(quiet()))...)
			if s, l := se.Parts(), b.engine.Parts(); !reflect.DeepEqual(s, l) {
				t.Errorf("the sidecar runs %v, the library %v", s, l)
			}
			if s, l := settings(se.Config()), settings(b.engine.Config()); !reflect.DeepEqual(s, l) {
				t.Errorf("running, the sidecar's and the library's engines differ:\nsidecar %s\nlibrary %s", describe(s), describe(l))
			}
		})
	}
}

// describe prints c with the pointers it holds followed.
func describe(c engine.Config) string {
	var rb string
	if c.Proxy.RetryBudget != nil {
		rb = fmt.Sprintf("%+v", *c.Proxy.RetryBudget)
	}
	return fmt.Sprintf("{Upstream:%+v Endpoints:%q EndpointZones:%q Transport:%+v Balancer:%+v Proxy:%+v RetryBudget:%s Probe:%+v WatchRebalance:%v Rebalance:%+v}",
		*c.Upstream, c.Endpoints, c.EndpointZones, c.Transport, c.Balancer, c.Proxy, rb, c.Probe, c.WatchRebalance, c.Rebalance)
}

// TestDefaultsAreTheEngines: the library starts from engine.Defaults,
// which names every part the sidecar runs by default.
func TestDefaultsAreTheEngines(t *testing.T) {
	f := newFixture(t)
	b := newBalancer(t, f.cfg, WithEndpoints(f.endpoints), WithLogger(quiet()))
	want := []string{engine.PartCredentials, engine.PartBalancer, engine.PartTransports, engine.PartProxy,
		engine.PartProbeTransports, engine.PartProber, engine.PartDiscoverer, engine.PartWatchRebalancer, engine.PartResolver, engine.PartStateLog}
	if got := b.engine.Parts(); !reflect.DeepEqual(got, want) {
		t.Errorf("the library runs %v, want %v", got, want)
	}
	if got := strings.Join(newBalancer(t, f.cfg, WithEndpoints(f.endpoints), WithLogger(quiet()), WithWatchRebalancing(false), WithProbeInterval(0), WithSkewRouting(false)).engine.Parts(), ","); strings.Contains(got, engine.PartWatchRebalancer) || strings.Contains(got, engine.PartProber) || strings.Contains(got, engine.PartDiscoverer) {
		t.Errorf("with rebalancing and probing off the library runs %s", got)
	}
}

// TestProbesUseTheirOwnConnections: as in the sidecar, /readyz probes go
// over connections of their own, never over the ones carrying the
// program's requests (which may be at their stream limit or have their
// flow-control window held by unread responses).
func TestProbesUseTheirOwnConnections(t *testing.T) {
	ca := testkit.NewCA(t)
	client := ca.Client("system:library-test")
	srv := testkit.NewAPIServer(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	}), testkit.WithClientAuth(tls.RequireAndVerifyClientCert))

	cfg := &rest.Config{
		Host:            srv.URL,
		TLSClientConfig: rest.TLSClientConfig{ServerName: "kubernetes", CAData: ca.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM},
		QPS:             -1,
	}
	b := newBalancer(t, cfg, WithProbeInterval(50*time.Millisecond), WithLogger(quiet()))
	cs, err := kubernetes.NewForConfig(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	// Requests and probes interleave for a while.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := cs.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	probeConns, requestConns := map[string]bool{}, map[string]bool{}
	for _, r := range srv.Seen() {
		if r.Path == "/readyz" {
			probeConns[r.RemoteAddr] = true
		} else {
			requestConns[r.RemoteAddr] = true
		}
	}
	if len(probeConns) == 0 || len(requestConns) == 0 {
		t.Fatalf("saw %d probe and %d request connections, want both", len(probeConns), len(requestConns))
	}
	for c := range probeConns {
		if requestConns[c] {
			t.Errorf("connection %s carried both probes and the program's requests (probes on %v, requests on %v)", c, probeConns, requestConns)
		}
	}
}
