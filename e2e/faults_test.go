package e2e_test

import (
	"context"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestFaultHelpers checks the harness's fault injection on the real
// apiservers, so that tests built on it fail for fanout's faults, not the
// harness's: a disconnected host is unreachable until reconnected, and a
// stopped or killed apiserver comes back on Start.
func TestFaultHelpers(t *testing.T) {
	if os.Getenv("FANOUT_E2E_NETNS") == "0" {
		t.Skip("fault injection by network needs network namespaces")
	}
	// A control plane of its own: a restarted apiserver is slower for a
	// while (cold caches), and a balancer rightly sends it less, which
	// would skew the spread tests that share the package's control plane.
	ctx, cp := ownControlPlane(t, 10*time.Minute, harness.Options{})
	if !cp.Net.NetNS {
		t.Skip("fault injection by network needs network namespaces")
	}
	victim := cp.APIServers[len(cp.APIServers)-1]

	cfg := rest.CopyConfig(cp.Admin)
	cfg.Host = victim.URL
	cfg.Timeout = 3 * time.Second
	direct, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reachable := func() error {
		_, err := direct.Discovery().RESTClient().Get().AbsPath("/livez").DoRaw(ctx)
		return err
	}

	t.Run("disconnect", func(t *testing.T) {
		if err := victim.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if err := reachable(); err == nil {
			t.Errorf("apiserver %d still answers after Disconnect", victim.Index+1)
		}
		if err := victim.Reconnect(); err != nil {
			t.Fatal(err)
		}
		if err := victim.WaitReady(ctx); err != nil {
			t.Fatalf("not ready after Reconnect: %v", err)
		}
	})

	t.Run("graceful stop and start", func(t *testing.T) {
		if err := victim.Stop(); err != nil {
			t.Fatal(err)
		}
		if victim.Running() {
			t.Fatal("still running after Stop")
		}
		// A graceful shutdown removes the apiserver's own lease, so the
		// kubernetes EndpointSlice drops it without waiting for the TTL.
		waitKubernetesEndpoints(ctx, t, cp, len(cp.APIServers)-1)
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitKubernetesEndpoints(ctx, t, cp, len(cp.APIServers))
	})

	t.Run("kill and start", func(t *testing.T) {
		if err := victim.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := reachable(); err == nil {
			t.Errorf("apiserver %d still answers after Kill", victim.Index+1)
		}
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := reachable(); err != nil {
			t.Errorf("apiserver %d unreachable after Start: %v", victim.Index+1, err)
		}
	})
}

// waitKubernetesEndpoints waits until the default/kubernetes EndpointSlice
// lists n addresses.
func waitKubernetesEndpoints(ctx context.Context, t *testing.T, cp *harness.ControlPlane, n int) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		// Ask an apiserver that is surely up: the first is never a victim.
		s, err := cp.AdminClient.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			continue
		}
		got = nil
		for _, ep := range s.Endpoints {
			got = append(got, ep.Addresses...)
		}
		sort.Strings(got)
		got = slices.Compact(got)
		if len(got) == n {
			return
		}
	}
	t.Fatalf("EndpointSlice default/kubernetes lists %v, want %d addresses", got, n)
}
