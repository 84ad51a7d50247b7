package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/testpki"
)

// TestSidecarResilienceDefaults: the library balances with the sidecar's
// flag defaults (components.defaultResilience starts from the same
// balancer.Recommended, checked in package components), not with the more
// permissive zero Config: ejections capped at a third of the endpoints,
// slow start on.
func TestSidecarResilienceDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want balancer.Config
	}{
		{"default policy", nil, balancer.Config{Policy: balancer.PolicyLeastRequest, MaxEjectedFraction: 1.0 / 3, ConsecutiveFailures: 5, SlowStart: 10 * time.Second}},
		{"round-robin", []Option{WithBalancerPolicy(balancer.PolicyRoundRobin)}, balancer.Config{Policy: balancer.PolicyRoundRobin, MaxEjectedFraction: 1.0 / 3, ConsecutiveFailures: 5, SlowStart: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaults()
			for _, opt := range tc.opts {
				opt(&o)
			}
			if got := balancerConfig(o); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("balancer config %+v, want %+v", got, tc.want)
			}
			if got := balancerConfig(o); !reflect.DeepEqual(got, balancer.Recommended(o.policy)) {
				t.Errorf("balancer config %+v differs from balancer.Recommended %+v", got, balancer.Recommended(o.policy))
			}
		})
	}
}

// TestFlagDefaultsAreTheLibrarys: the library (package client) passes
// the balancer, proxy and prober the resilience settings that the sidecar
// builds from an empty command line parsed through its real flag set, so
// a flag registered with a default of its own, or a library that passes
// something else, is caught here.
func TestFlagDefaultsAreTheLibrarys(t *testing.T) {
	for _, policy := range []string{"", balancer.PolicyRoundRobin} {
		name := "default policy"
		if policy != "" {
			name = policy
		}
		t.Run(name, func(t *testing.T) {
			o := components.NewOptions()
			fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
			o.AddFlags(fs)
			args := []string{}
			if policy != "" {
				args = append(args, "--balancer="+policy)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatalf("parsing %q: %v", args, err)
			}
			sidecarBalancer, sidecarProxy, sidecarProber := components.ResilienceConfigs(*o)

			lo := defaults()
			if policy != "" {
				WithBalancerPolicy(policy)(&lo)
			}
			libBalancer, libProxy, libProber := balancerConfig(lo), proxyConfig(), proberConfig(lo)

			if !reflect.DeepEqual(libBalancer, sidecarBalancer) {
				t.Errorf("the library's balancer config is %+v, the sidecar's flag defaults give %+v", libBalancer, sidecarBalancer)
			}
			if libProxy.RetryBudget == nil || sidecarProxy.RetryBudget == nil || *libProxy.RetryBudget != *sidecarProxy.RetryBudget {
				t.Errorf("the library's retry budget is %+v, the sidecar's flag defaults give %+v",
					libProxy.RetryBudget, sidecarProxy.RetryBudget)
			}
			if libProber.Interval != sidecarProber.Interval || libProber.Rise != sidecarProber.Rise || libProber.Fall != sidecarProber.Fall {
				t.Errorf("the library probes every %v with rise/fall %d/%d, the sidecar's flag defaults give %v and %d/%d",
					libProber.Interval, libProber.Rise, libProber.Fall, sidecarProber.Interval, sidecarProber.Rise, sidecarProber.Fall)
			}
		})
	}
}

// TestProbesUseTheirOwnConnections: as in the sidecar, /readyz probes go
// over connections of their own, never over the ones carrying the
// program's requests (which may be at their stream limit or have their
// flow-control window held by unread responses).
func TestProbesUseTheirOwnConnections(t *testing.T) {
	ca := testpki.NewCA(t)
	client := ca.Client("system:library-test")
	var mu sync.Mutex
	probeConns, requestConns := map[string]bool{}, map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.URL.Path == "/readyz" {
			probeConns[r.RemoteAddr] = true
		} else {
			requestConns[r.RemoteAddr] = true
		}
		mu.Unlock()
		if r.URL.Path == "/readyz" {
			fmt.Fprint(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = ca.ServerTLSConfig(ca.Serving("kubernetes"), tls.RequireAndVerifyClientCert)
	srv.StartTLS()
	defer srv.Close()

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
	mu.Lock()
	defer mu.Unlock()
	if len(probeConns) == 0 || len(requestConns) == 0 {
		t.Fatalf("saw %d probe and %d request connections, want both", len(probeConns), len(requestConns))
	}
	for c := range probeConns {
		if requestConns[c] {
			t.Errorf("connection %s carried both probes and the program's requests (probes on %v, requests on %v)", c, probeConns, requestConns)
		}
	}
}
