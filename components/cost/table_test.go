package cost

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/reqinfo"
)

const kcmUA = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/system:serviceaccount:kube-system:replicaset-controller"

func infoOf(t testing.TB, method, target string) *reqinfo.Info {
	t.Helper()
	r, err := http.NewRequest(method, "http://127.0.0.1:7080"+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	info := reqinfo.New(r)
	return &info
}

func newTable(t testing.TB, size int) *Table {
	t.Helper()
	tab, err := New(Config{Size: size, MetricsTop: min(size, DefaultMetricsTop)})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// rowOf finds the row of component and resource in s.
func rowOf(t testing.TB, s Snapshot, component, verb, resource string) RowSnapshot {
	t.Helper()
	for _, r := range s.Rows {
		if r.Component == component && r.Verb == verb && r.Resource == resource {
			return r
		}
	}
	t.Fatalf("no row %s %s %s in %+v", component, verb, resource, s.Rows)
	return RowSnapshot{}
}

func TestTableCounts(t *testing.T) {
	tab := newTable(t, 10)
	list := infoOf(t, "GET", "/apis/apps/v1/namespaces/ns/replicasets")
	tab.Short(list, kcmUA, &Outcome{Code: 200, Received: 100, Elapsed: 3 * time.Millisecond})
	tab.Short(list, kcmUA, &Outcome{Code: 404, Received: 50, Elapsed: 20 * time.Millisecond, Retries: 1})
	tab.Short(list, kcmUA, &Outcome{Code: 500, Elapsed: 40 * time.Second})
	tab.Short(list, kcmUA, &Outcome{Code: 503, Failed: true, Sent: 7, Elapsed: time.Second})

	watch := infoOf(t, "GET", "/apis/apps/v1/replicasets?watch=true")
	o := &Outcome{Code: 200}
	row := tab.Open(watch, kcmUA, o)
	row.Events().Add(3)
	refused := &Outcome{Code: 429}
	tab.Close(tab.Open(watch, kcmUA, refused), refused)

	s := tab.Snapshot()
	r := rowOf(t, s, "kube-controller-manager/replicaset-controller", "list", "replicasets")
	if r.Requests != 4 || r.Errors != (Errors{1, 1, 1}) || r.Retries != 1 || r.BytesSent != 7 || r.BytesReceived != 150 {
		t.Errorf("list row %+v: want 4 requests, errors 1/1/1, 1 retry, 7 bytes sent, 150 received", r)
	}
	if r.Latency.Count != 4 || math.Abs(r.Latency.Sum-41.023) > 1e-9 {
		t.Errorf("latency count %d sum %v, want 4 and 41.023", r.Latency.Count, r.Latency.Sum)
	}
	wantBuckets := []int64{1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4} // 3ms, 20ms, 1s, 40s
	for i, b := range r.Latency.Buckets {
		if b.Count != wantBuckets[i] {
			t.Errorf("bucket le %v: %d, want %d", b.LE, b.Count, wantBuckets[i])
		}
	}
	w := rowOf(t, s, "kube-controller-manager/replicaset-controller", "watch", "replicasets")
	if w.Requests != 2 || w.WatchesOpen != 1 || w.WatchEvents != 3 || w.Errors.Status4xx != 1 || w.Latency.Count != 0 || w.Scope != ScopeCluster {
		t.Errorf("watch row %+v: want 2 requests, 1 open, 3 events, one 4xx, no latency, cluster scope", w)
	}
	o.Received, o.Elapsed = 999, time.Minute
	tab.Close(row, o)
	w = rowOf(t, tab.Snapshot(), "kube-controller-manager/replicaset-controller", "watch", "replicasets")
	if w.WatchesOpen != 0 || w.BytesReceived != 999 || w.watchSeconds != 60 {
		t.Errorf("after Close: %d open, %d bytes, %v watch seconds; want 0, 999, 60", w.WatchesOpen, w.BytesReceived, w.watchSeconds)
	}
}

// TestEvictionFoldsIntoOther: however many keys clients make up, the table
// holds Size of them, and the totals over its rows stay exact: an evicted
// key's counts, and what its open watch adds after the eviction, land in
// "other".
func TestEvictionFoldsIntoOther(t *testing.T) {
	tab := newTable(t, 3)
	watchInfo := infoOf(t, "GET", "/api/v1/pods?watch=true")
	wo := &Outcome{Code: 200}
	watch := tab.Open(watchInfo, kcmUA, wo)
	const n = 50
	for i := range n {
		tab.Short(infoOf(t, "GET", fmt.Sprintf("/apis/example.com/v1/r%d", i)), kcmUA, &Outcome{Code: 200, Received: 10})
	}
	watch.Events().Add(5) // after its key was evicted
	s := tab.Snapshot()
	if len(s.Rows) != 4 || s.Evictions != n+1-3 {
		t.Fatalf("%d rows and %d evictions, want 3 keys plus other and %d", len(s.Rows), s.Evictions, n+1-3)
	}
	other := s.Rows[len(s.Rows)-1]
	if other.Component != Other || other.WatchesOpen != 1 {
		t.Errorf("last row %+v: want component other holding the open watch", other)
	}
	wo.Elapsed = time.Second
	tab.Close(watch, wo)
	s = tab.Snapshot()
	var total RowSnapshot
	for i := range s.Rows {
		total.add(&s.Rows[i])
	}
	if total.Requests != n+1 || total.BytesReceived != 10*n || total.WatchesOpen != 0 || total.WatchEvents != 5 {
		t.Errorf("totals %+v: want %d requests, %d bytes, no open watch, 5 events", total, n+1, 10*n)
	}
}

// TestConcurrentEvictions: updates racing evictions lose nothing.
func TestConcurrentEvictions(t *testing.T) {
	tab := newTable(t, 4)
	infos := make([]*reqinfo.Info, 16)
	for i := range infos {
		infos[i] = infoOf(t, "GET", fmt.Sprintf("/apis/example.com/v1/r%d", i))
	}
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tab.Short(infos[(i*7+w)%len(infos)], kcmUA, &Outcome{Code: 200})
			}
		})
	}
	wg.Wait()
	var total int64
	for _, r := range tab.Snapshot().Rows {
		total += r.Requests
	}
	if total != workers*each {
		t.Errorf("%d requests counted, want %d", total, workers*each)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		flag string
	}{
		{Config{Size: -1}, "--cost-table-size"},
		{Config{Size: MaxSize + 1}, "--cost-table-size"},
		{Config{Size: 10, MetricsTop: MaxMetricsTop + 1}, "--cost-metrics-top"},
		{Config{Size: 10, MetricsTop: -1}, "--cost-metrics-top"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", tc.c, err, tc.flag)
		}
	}
	for _, c := range []Config{{Size: DefaultSize, MetricsTop: DefaultMetricsTop}, {Size: 0, MetricsTop: DefaultMetricsTop}, {Size: 5, MetricsTop: DefaultMetricsTop}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if tab, err := New(Config{}); tab != nil || err != nil {
		t.Errorf("New with Size 0 = %v, %v; want the nil table (off)", tab, err)
	}
}

// TestSnapshotJSON: the contract's field names, and +Inf as a string.
func TestSnapshotJSON(t *testing.T) {
	tab := newTable(t, 10)
	tab.Short(infoOf(t, "GET", "/api/v1/namespaces/ns/pods/p/log"), "kubectl/v1.37.2 (linux/amd64) kubernetes/0123abc", &Outcome{Code: 200, Elapsed: time.Millisecond})
	b, err := json.Marshal(tab.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"since":`, `"now":`, `"capacity":10`, `"evictions":0`, `"component":"kubectl"`, `"verb":"get"`,
		`"group":""`, `"resource":"pods"`, `"subresource":"log"`, `"scope":"namespaced"`, `"requests":1`,
		`"errors":{"4xx":0,"5xx":0,"failed":0}`, `"retries":0`, `"latency_seconds":{"count":1,"sum":0.001,"buckets":[{"le":0.005,"count":1}`,
		`{"le":"+Inf","count":1}]}`, `"bytes_sent":0`, `"bytes_received":0`, `"watches_open":0`, `"watch_events":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "list_objects") {
		t.Errorf("JSON has list_objects, which is never known: %s", b)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Rows[0].Latency.Buckets[len(Buckets)]; !math.IsInf(got.LE, 1) || got.Count != 1 {
		t.Errorf("decoded +Inf bucket %+v", got)
	}
	off, _ := json.Marshal((*Table)(nil).Snapshot())
	if !strings.Contains(string(off), `"capacity":0`) || !strings.Contains(string(off), `"rows":[]`) {
		t.Errorf("off table: %s", off)
	}
}

// allocsPerUpdate is what Table.Short allocates for a key already in the
// table: nothing.
const allocsPerUpdate = 0

func TestUpdateAllocations(t *testing.T) {
	tab := newTable(t, 10)
	info := infoOf(t, "GET", "/apis/apps/v1/namespaces/kube-system/replicasets/x")
	o := &Outcome{Code: 200, Received: 512, Elapsed: 2 * time.Millisecond}
	tab.Short(info, kcmUA, o)
	if got := testing.AllocsPerRun(1000, func() { tab.Short(info, kcmUA, o) }); got > allocsPerUpdate {
		t.Errorf("Table.Short allocates %.1f times per request, budget %d", got, allocsPerUpdate)
	}
}

// BenchmarkShort is the per-request update: go test -run xxx -bench Short -benchmem ./components/cost/
func BenchmarkShort(b *testing.B) {
	tab := newTable(b, DefaultSize)
	info := infoOf(b, "GET", "/apis/apps/v1/namespaces/kube-system/replicasets/x")
	o := &Outcome{Code: 200, Received: 512, Elapsed: 2 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		tab.Short(info, kcmUA, o)
	}
}

// BenchmarkShortParallel is the same from every CPU at once, one key: the
// table's lock at its most contended.
func BenchmarkShortParallel(b *testing.B) {
	tab := newTable(b, DefaultSize)
	info := infoOf(b, "GET", "/apis/apps/v1/namespaces/kube-system/replicasets/x")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		o := &Outcome{Code: 200, Received: 512, Elapsed: 2 * time.Millisecond}
		for pb.Next() {
			tab.Short(info, kcmUA, o)
		}
	})
}

// TestUserAgentCacheBoundsBytes: 256 distinct User-Agents of 1 MB each
// (the header limit allows them) leave the User-Agent cache holding a
// bounded number of bytes, not 256 MB, and still count by component.
func TestUserAgentCacheBoundsBytes(t *testing.T) {
	tab := newTable(t, DefaultSize)
	info := infoOf(t, http.MethodGet, "/api/v1/pods")
	for i := range uaCacheSize {
		ua := fmt.Sprintf("hostile/%d ", i) + strings.Repeat("x", 1<<20)
		tab.Short(info, ua, &Outcome{Code: 200})
	}
	var held int
	tab.mu.Lock()
	for _, k := range tab.agents.Keys() {
		v, _ := tab.agents.Peek(k)
		held += len(k) + len(v)
	}
	tab.mu.Unlock()
	if limit := uaCacheSize * (maxCachedUserAgent + 2*maxComponent + 1); held > limit {
		t.Errorf("the User-Agent cache holds %d bytes after %d distinct 1 MB User-Agents, want at most %d", held, uaCacheSize, limit)
	}
	if r := rowOf(t, tab.Snapshot(), "hostile", "list", "pods"); r.Requests != uaCacheSize {
		t.Errorf("component hostile counted %d requests, want %d", r.Requests, uaCacheSize)
	}
}
