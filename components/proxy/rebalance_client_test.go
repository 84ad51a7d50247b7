package proxy

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	fwatch "github.com/fanout-dev/fanout/components/watch"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// watchBackend stands in for kube-apiserver: it serves ConfigMap watches
// in JSON, a WatchList's initial events and closing bookmark first, then
// a MODIFIED event every 10ms, and LISTs; it records every request.
type watchBackend struct {
	mu       sync.Mutex
	requests []string
	gzipped  int // WatchLists answered with gzip
	rv       atomic.Uint64
}

func (b *watchBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.requests = append(b.requests, r.URL.RawQuery)
	b.mu.Unlock()
	q := r.URL.Query()
	cm := func(rv uint64) corev1.ConfigMap {
		return corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", ResourceVersion: strconv.FormatUint(rv, 10)}}
	}
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" {
		list := corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(b.rv.Load(), 10)}, Items: []corev1.ConfigMap{cm(b.rv.Load())}}
		_ = jsonEncode(w, &list)
		return
	}
	fl := w.(http.Flusher)
	// Like kube-apiserver's WatchListCompression: a WatchList accepting
	// gzip gets one gzip member per flush.
	gz := q.Get("sendInitialEvents") == "true" && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	if gz {
		w.Header().Set("Content-Encoding", "gzip")
		b.mu.Lock()
		b.gzipped++
		b.mu.Unlock()
	}
	send := func(typ watch.EventType, obj runtime.Object) bool {
		raw, _ := jsonMarshal(obj)
		var out io.Writer = w
		var zw *gzip.Writer
		if gz {
			zw = gzip.NewWriter(w)
			out = zw
		}
		if err := jsonEncode(out, &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}); err != nil {
			return false
		}
		if zw != nil && zw.Close() != nil {
			return false
		}
		fl.Flush()
		return true
	}
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	if q.Get("sendInitialEvents") == "true" {
		rv := b.rv.Load()
		obj := cm(rv)
		send(watch.Added, &obj)
		end := cm(rv)
		end.Name, end.Namespace, end.Annotations = "", "", map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		send(watch.Bookmark, &end)
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
		obj := cm(b.rv.Add(1))
		if !send(watch.Modified, &obj) {
			return
		}
	}
}

func (b *watchBackend) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// TestRebalanceWithReflector runs a real client-go informer through the
// proxy: once the rebalancer ends its watch, the reflector must re-watch
// from its last resourceVersion, with no LIST and no second WatchList.
func TestRebalanceWithReflector(t *testing.T) {
	backend := &watchBackend{}
	backend.rv.Store(100)
	picker, up := proxytest.Backend(t, backend)
	addr := picker.Addrs()[0]
	loads := staticLoads{
		{Address: addr, Usable: true, OpenLong: 3},
		{Address: "other:443", Usable: true},
	}
	// The rebalancer's own loop compares the loads every 20ms; its
	// metrics say what it did.
	reg := prometheus.NewRegistry()
	r, err := fwatch.NewRebalancer(fwatch.RebalanceConfig{MinAge: 50 * time.Millisecond, Margin: time.Millisecond, Interval: 20 * time.Millisecond}, loads, reg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, url := startProxy(t, Config{Rebalancer: r}, picker, up, nil)

	client, err := kubernetes.NewForConfig(&rest.Config{Host: url})
	if err != nil {
		t.Fatal(err)
	}
	var lists, watchLists, watches, watchErrs atomic.Int64
	cms := client.CoreV1().ConfigMaps("ns")
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			watches.Add(1)
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				watchLists.Add(1)
			}
			return cms.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	if err := inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) { watchErrs.Add(1) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	defer func() { cancel(); wg.Wait() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	startLists, startWatchLists := lists.Load(), watchLists.Load()

	// The first tick records the other endpoint's readiness; the watch
	// then passes on newer events and ages past MinAge.
	deadline := time.Now().Add(testkit.WaitLimit)
	r.Start()
	defer r.Stop()
	for metricValue(t, reg, "fanout_watch_rebalanced_total", "framing", "json") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the rebalancer ended no watch; blocked: initial_events %v, too_young %v, not_caught_up %v",
				metricValue(t, reg, "fanout_watch_rebalance_blocked", "reason", "initial_events"),
				metricValue(t, reg, "fanout_watch_rebalance_blocked", "reason", "too_young"),
				metricValue(t, reg, "fanout_watch_rebalance_blocked", "reason", "not_caught_up"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for watches.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the reflector did not re-watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A re-list would come before or instead of the new watch's events:
	// once the informer has synced events the backend sent after the
	// re-watch, the reflector has provably settled on the new watch.
	rewatchRV := backend.rv.Load()
	for {
		if rv, err := strconv.ParseUint(inf.LastSyncResourceVersion(), 10, 64); err == nil && rv > rewatchRV+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the informer synced resourceVersion %q, not beyond %d: the new watch delivered no events", inf.LastSyncResourceVersion(), rewatchRV+2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := lists.Load() - startLists; n != 0 {
		t.Errorf("the reflector listed %d times after its watch was ended, want 0", n)
	}
	if n := watchLists.Load() - startWatchLists; n != 0 {
		t.Errorf("the reflector sent %d more WatchLists after its watch was ended, want 0", n)
	}
	if n := watchErrs.Load(); n != 0 {
		t.Errorf("the reflector reported %d watch errors, want 0", n)
	}
	backend.mu.Lock()
	gzipped := backend.gzipped
	backend.mu.Unlock()
	if gzipped != 1 {
		t.Errorf("the backend gzipped %d WatchLists, want 1: the test does not cover WatchListCompression", gzipped)
	}
	reqs := backend.log()
	last := reqs[len(reqs)-1]
	t.Logf("backend requests: %v", reqs)
	if q := mustQuery(t, last); q.Get("sendInitialEvents") != "" || q.Get("resourceVersion") == "" || q.Get("resourceVersion") == "0" {
		t.Errorf("the re-watch was %q, want a plain watch from the last resourceVersion", last)
	}
}

// metricValue is the value of the counter or gauge name{label="value"}
// in reg, 0 when absent.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	v, _ := testkit.Series(t, reg, name, map[string]string{label: value})
	return v
}

// staticLoads is a LoadSource whose loads never change.
type staticLoads []balancer.WatchLoad

func (s staticLoads) WatchLoads() []balancer.WatchLoad {
	return append([]balancer.WatchLoad(nil), s...)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func jsonEncode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

func mustQuery(t *testing.T, raw string) neturl.Values {
	t.Helper()
	q, err := neturl.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestFreshnessRequestCarriesWatchCredentials: a quiet watch (one event,
// then nothing) on an endpoint holding more than its share stays blocked
// as not caught up, and the rebalancer's freshness request reaches that
// same endpoint as a LIST (limit=1) with the watch's own bearer token,
// through the transport of the watch's credentials mode.
func TestFreshnessRequestCarriesWatchCredentials(t *testing.T) {
	type seen struct{ query, auth, agent string }
	var mu sync.Mutex
	var lists []seen
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			mu.Lock()
			lists = append(lists, seen{r.URL.RawQuery, r.Header.Get("Authorization"), r.UserAgent()})
			mu.Unlock()
			_, _ = io.WriteString(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"100"},"items":[]}`)
			return
		}
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"ns","resourceVersion":"100"}}}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	picker, up := proxytest.Backend(t, backend)
	addr := picker.Addrs()[0]
	loads := staticLoads{
		{Address: addr, Usable: true, OpenLong: 3},
		{Address: "other:443", Usable: true, UsableSince: time.Now().Add(-time.Hour)},
	}
	reg := prometheus.NewRegistry()
	r, err := fwatch.NewRebalancer(fwatch.RebalanceConfig{MinAge: 50 * time.Millisecond, Margin: time.Millisecond,
		Interval: 20 * time.Millisecond, Freshness: true}, loads, reg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, url := startProxy(t, Config{Rebalancer: r}, picker, up, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=90&labelSelector=app%3Dx", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer the-watchs-own")
	req.Header.Set("User-Agent", "ctrl/1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1024)); err != nil {
		t.Fatalf("reading the first event: %v", err)
	}
	// The first tick records the other endpoint's readiness and the
	// resourceVersion 100 the watch cannot beat without a newer event.
	r.Start()
	defer r.Stop()
	deadline := time.Now().Add(testkit.WaitLimit)
	for metricValue(t, reg, "fanout_watch_freshness_requests_total", "result", "ok") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no freshness request answered within %s; blocked not_caught_up %v", testkit.WaitLimit,
				metricValue(t, reg, "fanout_watch_rebalance_blocked", "reason", "not_caught_up"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	got := append([]seen(nil), lists...)
	mu.Unlock()
	want := seen{"labelSelector=app%3Dx&limit=1", "Bearer the-watchs-own", "ctrl/1.0 fanout-watch-freshness"}
	if len(got) != 1 || got[0] != want {
		t.Errorf("LISTs at the watch's endpoint: %+v, want one: %+v", got, want)
	}
	if n := metricValue(t, reg, "fanout_watch_rebalanced_total", "framing", "json"); n != 0 {
		t.Errorf("the quiet watch was ended (%v) although no event proved it caught up", n)
	}
	var modes []string
	for _, c := range up.Calls() {
		modes = append(modes, c.Mode.String())
	}
	if strings.Join(modes, ",") != "passthrough,passthrough" {
		t.Errorf("transport modes of the watch and its freshness request: %v, want passthrough for both", modes)
	}
}
