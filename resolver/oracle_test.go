package resolver

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestListWatchMatchesReflector is the oracle test of the resolver's own
// EndpointSlice list/watch (sliceclient.go, listWatch), kept instead of
// client-go to hold k8s.io out of the sidecar: client-go's reflector follows the same fake kube-apiserver through a random
// history of changes, bookmarks, watches the server ends, broken streams
// and 410 Gone. After every step both copies must reach what the server
// holds, slice by slice and resourceVersion by resourceVersion. The
// reflector also vouches for the fake: a fake that served a wrong history
// would leave the two apart.
//
// Both run in a synctest bubble, each with its own backoff as it is: the
// bubble's time runs only while both wait.
func TestListWatchMatchesReflector(t *testing.T) {
	// The fake serves list then watch, as kube-apiserver before
	// streaming lists; the reflector's watch-list would need more.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { matchReflector(t, seed) })
		})
	}
}

func matchReflector(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	f := newFakeAPIServer(t,
		slice("k-1", "kubernetes", https, ep{"10.0.0.1", "ready", ""}),
		slice("o-1", "other", https, ep{"10.9.9.9", "ready", ""}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	// fanout's list/watch.
	client, err := newSliceClient(f.apiServer(), "default", "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	lw := &listWatch{client: client, changed: func() {}, failed: func(error) {}}
	wg.Go(func() { lw.run(ctx) })

	// client-go's reflector, the same selector.
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host:        "https://kubernetes",
		Transport:   f.transport(),
		ContentType: runtime.ContentTypeJSON,
	})
	if err != nil {
		t.Fatal(err)
	}
	sel := discoveryv1.LabelServiceName + "=kubernetes"
	slices := cs.DiscoveryV1().EndpointSlices("default")
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := cache.NewReflectorWithOptions(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return slices.Watch(ctx, o)
		},
	}, &discoveryv1.EndpointSlice{}, store, cache.ReflectorOptions{})
	wg.Go(func() { r.RunWithContext(ctx) })

	ends := []string{"clean", "break", "gone"}
	for step := range 40 {
		var did string
		switch n := rng.IntN(10); {
		case n < 4:
			s := randomSlice(rng)
			f.change("ADDED", s) // ADDED or MODIFIED, as the name exists
			did = "write " + s.Name
		case n < 6:
			name := fmt.Sprintf("k-%d", 1+rng.IntN(4))
			f.remove(name)
			did = "remove " + name
		case n < 7:
			f.bookmark()
			did = "bookmark"
		default:
			how := ends[rng.IntN(len(ends))]
			f.endWatches(how)
			// The fake's compaction makes the current resourceVersion
			// too old as well: a change moves past it, as the real
			// server's writes do.
			f.change("ADDED", randomSlice(rng))
			did = "end watches " + how + ", then a write"
		}
		want := f.truth()
		// Time runs a second at a time, through both backoffs (the
		// reflector's reaches 30s), each time until both are idle.
		for start := time.Now(); ; time.Sleep(time.Second) {
			synctest.Wait()
			if maps.Equal(lw.resourceVersions(), want) && maps.Equal(storeVersions(store), want) {
				break
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("step %d (%s): after 2 minutes the server holds %v; fanout's list/watch %v, client-go's reflector %v",
					step, did, want, lw.resourceVersions(), storeVersions(store))
			}
		}
		t.Logf("step %d (%s): %d slices agree", step, did, len(want))
	}
}

// randomSlice is a slice of service kubernetes, now and then of another
// service, with one to three endpoints in random conditions and zones.
func randomSlice(rng *rand.Rand) *discoveryv1.EndpointSlice {
	service, name := "kubernetes", fmt.Sprintf("k-%d", 1+rng.IntN(4))
	if rng.IntN(5) == 0 {
		service, name = "other", "o-1"
	}
	conds := []string{"", "ready", "terminating", "unready", "gone"}
	zones := []string{"", "z1", "z2"}
	var eps []ep
	for i := range 1 + rng.IntN(3) {
		eps = append(eps, ep{fmt.Sprintf("10.0.%d.%d", rng.IntN(3), i+1), conds[rng.IntN(len(conds))], zones[rng.IntN(len(zones))]})
	}
	return slice(name, service, https, eps...)
}

// truth is what the server holds for service kubernetes: slice name to
// resourceVersion.
func (f *fakeAPIServer) truth() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for name, o := range f.objects {
		if o.Labels[discoveryv1.LabelServiceName] == "kubernetes" {
			out[name] = o.ResourceVersion
		}
	}
	return out
}

// resourceVersions is the list/watch's copy as slice name to
// resourceVersion; nil before the first list.
func (lw *listWatch) resourceVersions() map[string]string {
	all, synced := lw.snapshot()
	if !synced {
		return nil
	}
	out := map[string]string{}
	for _, s := range all {
		out[s.Metadata.Name] = s.Metadata.ResourceVersion
	}
	return out
}

func storeVersions(s cache.Store) map[string]string {
	out := map[string]string{}
	for _, o := range s.List() {
		es := o.(*discoveryv1.EndpointSlice)
		out[es.Name] = es.ResourceVersion
	}
	return out
}
