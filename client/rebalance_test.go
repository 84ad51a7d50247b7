package client

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// watchServers are three apiservers sharing one ConfigMap store: every
// write (tick) reaches the watches open on each of them with the next
// resourceVersion, as a real control plane's watch caches do.
type watchServers struct {
	servers []*watchServer
	mu      sync.Mutex
	rv      int
	subs    map[chan string]bool
}

// watchServer is one of them: the kit's fake apiserver, which answers
// /readyz as set.
type watchServer struct {
	*testkit.APIServer
	open    atomic.Int64 // watches open now
	initial atomic.Int64 // lists and WatchLists: what a re-list costs
	// fresh counts fanout's own freshness LISTs (limit=1, its
	// User-Agent suffix), which are no re-list.
	fresh atomic.Int64
}

const tickCM = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"tick","namespace":"default","resourceVersion":"%d"}}`

func newWatchServers(t *testing.T, ca *testkit.CA) *watchServers {
	w := &watchServers{rv: 1, subs: map[chan string]bool{}}
	for range 3 {
		s := &watchServer{}
		s.APIServer = testkit.NewAPIServer(t, ca, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { w.serve(s, rw, r) }))
		w.servers = append(w.servers, s)
	}
	return w
}

func (w *watchServers) serve(s *watchServer, rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/namespaces/default/configmaps" {
		http.NotFound(rw, r)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	w.mu.Lock()
	rv := w.rv
	w.mu.Unlock()
	if q.Get("watch") != "true" {
		if strings.HasSuffix(r.UserAgent(), " fanout-watch-freshness") {
			s.fresh.Add(1)
		} else {
			s.initial.Add(1)
		}
		fmt.Fprintf(rw, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"%d"},"items":[`+tickCM+`]}`, rv, rv)
		return
	}
	s.open.Add(1)
	defer s.open.Add(-1)
	ch := make(chan string, 1024)
	w.mu.Lock()
	w.subs[ch] = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	}()
	if q.Get("sendInitialEvents") == "true" {
		s.initial.Add(1)
		fmt.Fprintf(rw, `{"type":"ADDED","object":`+tickCM+"}\n", rv)
		fmt.Fprintf(rw, `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"%d","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", rv)
	}
	rw.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-ch:
			fmt.Fprint(rw, ev)
			rw.(http.Flusher).Flush()
		}
	}
}

// tick writes the ConfigMap: one MODIFIED event on every open watch.
func (w *watchServers) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rv++
	ev := fmt.Sprintf(`{"type":"MODIFIED","object":`+tickCM+"}\n", w.rv)
	for ch := range w.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

func (w *watchServers) open() []int64 {
	out := make([]int64, len(w.servers))
	for i, s := range w.servers {
		out[i] = s.open.Load()
	}
	return out
}

func (w *watchServers) initial() int64 {
	var n int64
	for _, s := range w.servers {
		n += s.initial.Load()
	}
	return n
}

// TestWatchRebalancingThroughWrap: the library rebalances watches as the
// sidecar does. Informers built from client.Wrap's config all watch the
// one apiserver that is ready; once the other two are ready, fanout ends
// watches between two events and client-go re-watches, from its last
// resourceVersion and without re-listing, on the others, until the
// watches are spread. WithWatchRebalancing(false) leaves them where they
// are: no rebalancer runs.
func TestWatchRebalancingThroughWrap(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("rebalancing=%v", on), func(t *testing.T) { testWatchRebalancing(t, on) })
	}
}

func testWatchRebalancing(t *testing.T, on bool) {
	ca := testkit.NewCA(t)
	client := ca.Client("system:library-test")
	w := newWatchServers(t, ca)
	var eps []string
	for _, s := range w.servers {
		eps = append(eps, s.URL)
	}
	for _, s := range w.servers[1:] {
		s.SetReadyz(http.StatusServiceUnavailable)
	}
	cfg := &rest.Config{
		Host:            eps[0],
		TLSClientConfig: rest.TLSClientConfig{ServerName: "kubernetes", CAData: ca.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM},
		QPS:             -1,
	}
	reg := prometheus.NewRegistry()
	fast := func(o *options) {
		o.tune = func(c *engine.Config) {
			// The defaults wait 10 s for a watch to age and 5 s for an
			// apiserver to catch up; the wiring is what is tested here.
			c.Rebalance.MinAge, c.Rebalance.Margin, c.Rebalance.Interval, c.Rebalance.Rate = 100*time.Millisecond, 100*time.Millisecond, 20*time.Millisecond, 50
			c.Balancer.SlowStart = 0
			// Apiserver 1 must stay ready throughout, even if a loaded
			// machine makes a few of its probes time out.
			c.Probe.Rise, c.Probe.Fall = 1, 5
		}
	}
	wrapped, closer, err := Wrap(cfg, WithEndpoints(strings.Join(eps, ",")), WithProbeInterval(100*time.Millisecond),
		WithRegisterer(reg), WithLogger(quiet()), WithWatchRebalancing(on), fast)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	b := closer.(*Balancer)
	testkit.WaitFor(t, "apiservers 2 and 3 out", func() bool { return readyCount(b) == 1 })

	const watches = 6
	stop := make(chan struct{})
	var factories []informers.SharedInformerFactory
	for range watches {
		f := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(wrapped), 0, informers.WithNamespace("default"))
		inf := f.Core().V1().ConfigMaps().Informer()
		f.Start(stop)
		if !cache.WaitForCacheSync(stopAfter(stop, testkit.WaitLimit), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		factories = append(factories, f)
	}
	defer func() {
		close(stop)
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	testkit.WaitFor(t, "every watch on apiserver 1", func() bool { return w.servers[0].open.Load() == watches })
	synced := w.initial()

	for _, s := range w.servers[1:] {
		s.SetReadyz(http.StatusOK)
	}
	testkit.WaitFor(t, "apiservers 2 and 3 back", func() bool { return readyCount(b) == 3 })
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	spread := func() bool {
		o := w.open()
		return o[0]+o[1]+o[2] == watches && o[0] <= 3 && o[1] >= 1 && o[2] >= 1
	}
	if on {
		start := time.Now()
		deadline := start.Add(testkit.WaitLimit)
		for !spread() {
			if time.Now().After(deadline) {
				t.Fatalf("watches per apiserver %v after %s, want them spread over the three", w.open(), testkit.WaitLimit)
			}
			<-ticker.C
			w.tick()
		}
		n := rebalanced(t, reg)
		if n == 0 {
			t.Error("fanout_watch_rebalanced_total is 0: the watches moved for another reason")
		}
		t.Logf("watches per apiserver %v %s after apiservers 2 and 3 were ready; %v ended by the rebalancer; %d lists since the informers synced",
			w.open(), time.Since(start).Round(time.Millisecond), n, w.initial()-synced)
	} else {
		// Nothing can end a watch: no rebalancer runs, none counts.
		if parts := b.engine.Parts(); slices.Contains(parts, engine.PartWatchRebalancer) {
			t.Errorf("with rebalancing off the engine runs %v", parts)
		}
		if n, err := testutil.GatherAndCount(reg, "fanout_watch_rebalanced_total"); err != nil || n != 0 {
			t.Errorf("fanout_watch_rebalanced_total has %d series with rebalancing off, want none registered (%v)", n, err)
		}
	}
	if n := w.initial(); n != synced {
		t.Errorf("the informers listed %d more times after they synced, want 0: a rebalanced watch must resume, not re-list", n-synced)
	}
}

// rebalanced sums fanout_watch_rebalanced_total over its framings.
func rebalanced(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() == "fanout_watch_rebalanced_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func readyCount(b *Balancer) int {
	n := 0
	for _, e := range b.Endpoints() {
		if e.State == balancer.StateReady {
			n++
		}
	}
	return n
}
