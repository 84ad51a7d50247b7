package e2e_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	fanoutclient "github.com/fanout-dev/fanout/client"
	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestLibrary is fanout linked into a client-go program (package client)
// instead of run as a sidecar: the program's own rest.Config, wrapped
// once. Its requests spread evenly over the three apiservers, and it sees
// no error while one of them restarts gracefully under load, with an
// informer watching throughout.
func TestLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Its own control plane: the restart would skew the spread tests'
	// shares on the shared one.
	cp, err := harness.Start(ctx, t, harness.Options{Nodes: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	const user, ns = "e2e-library-client", "e2e-library"
	kubeconfig, err := cp.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	userNamespace(ctx, t, cp, ns, user)
	direct, err := harness.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The kubeconfig names the first apiserver; the library learns the
	// others from the same --endpoints list the sidecar tests use.
	b, err := fanoutclient.New(direct, fanoutclient.WithEndpoints(strings.Join(cp.Endpoints(), ",")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := b.Config()

	// 1. Spread: the sidecar tests' workload, 33% ± 5 points each.
	res := mixed.run(ctx, t, cfg, ns)
	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through the library: %d requests + %d watches in %s (%d watch events); served: %s",
		res.requests, mixed.watches, res.elapsed.Round(time.Millisecond), res.events, harness.FormatShares(counts))
	checkServedAll(t, counts, res.requests+int64(mixed.watches))
	mixed.checkWatches(t, res)
	for i, s := range harness.Shares(counts) {
		if s < 0.2833 || s > 0.3833 {
			t.Errorf("apiserver %d served %.1f%% of %s's requests, want 33.3%% ± 5 points (%s)", i+1, 100*s, user, harness.FormatShares(counts))
		}
	}

	// 2. Graceful restart under load, as TestGracefulRestartUnderLoad
	// does through the sidecar, with an informer on the same config.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lastEvent atomic.Int64 // UnixNano of the informer's latest event
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	mark := func(any) { lastEvent.Store(time.Now().UnixNano()) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: mark, UpdateFunc: func(_, n any) { mark(n) }, DeleteFunc: mark,
	}); err != nil {
		t.Fatal(err)
	}
	stopInformer := make(chan struct{})
	factory.Start(stopInformer)
	defer func() { close(stopInformer); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer through the library did not sync")
	}

	load := startLoad(ctx, t, cfg, ns, "lib")
	victim := cp.APIServers[len(cp.APIServers)-1]
	time.Sleep(5 * time.Second)
	stopStart := time.Now()
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver %d stopped gracefully in %s", victim.Index+1, time.Since(stopStart).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver %d ready again %s after the stop began", victim.Index+1, time.Since(stopStart).Round(time.Millisecond))
	// The prober checks /readyz every 2s; give traffic time to come back.
	time.Sleep(15 * time.Second)
	load.Stop()
	ready := victim.ReadyAt()
	early := servedBetween(t, cp, victim, user, victim.StartedAt(), ready.Add(-time.Second))
	late := servedBetween(t, cp, victim, user, ready, time.Now())
	t.Logf("%d requests sent, %d cycles failed; after its restart apiserver %d served %d of the library's requests before ready and %d after; endpoints: %+v",
		load.sent.Load(), load.failed.Load(), victim.Index+1, early, late, b.Endpoints())
	load.reportErrors(t)
	if early > 0 {
		t.Errorf("apiserver %d served %d requests after its restart but before its /readyz passed", victim.Index+1, early)
	}
	if late == 0 {
		t.Errorf("apiserver %d served nothing in the 15 s after it was ready again: the library did not take it back", victim.Index+1)
	}
	if last := time.Unix(0, lastEvent.Load()); !last.After(ready) {
		t.Errorf("the informer's last event came at %s, before apiserver %d was back (%s): its watch did not survive the restart",
			last.Format(time.RFC3339Nano), victim.Index+1, ready.Format(time.RFC3339Nano))
	}
	// The load stopped, possibly mid-cycle: the informer must converge on
	// what the apiserver holds.
	want := map[string]bool{}
	list, err := cp.AdminClient.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		want[cm.Name] = true
	}
	var got map[string]bool
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got = map[string]bool{}
		for _, o := range inf.GetStore().List() {
			got[o.(*corev1.ConfigMap).Name] = true
		}
		if maps.Equal(got, want) || time.Now().After(deadline) {
			break
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the informer holds ConfigMaps %v, the apiserver %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
}
