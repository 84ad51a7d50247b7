package cost

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// seriesPerKey is how many series one exported key (or "other") has:
// requests, errors by three classes, retries, the summary's sum and count,
// sent and received bytes, watches, watch events.
const seriesPerKey = 11

func countSeries(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for range mf.GetMetric() {
			n++
			if mf.GetType().String() == "SUMMARY" {
				n++ // _sum and _count
			}
		}
	}
	return n
}

func TestCollectorLint(t *testing.T) {
	tab := newTable(t, 10)
	tab.Short(infoOf(t, "GET", "/api/v1/namespaces/ns/pods/p/log"), kcmUA, &Outcome{Code: 200, Elapsed: time.Millisecond})
	problems, err := testutil.CollectAndLint(NewCollector(tab, 5))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP fanout_cost_watches Watches (long-running requests answered 2xx) open now; keys as fanout_cost_requests_total.
# TYPE fanout_cost_watches gauge
fanout_cost_watches{component="kube-controller-manager/replicaset-controller",group="",resource="pods/log",scope="namespaced",verb="get"} 0
fanout_cost_watches{component="other",group="",resource="",scope="",verb=""} 0
`
	if err := testutil.CollectAndCompare(NewCollector(tab, 5), strings.NewReader(want), "fanout_cost_watches"); err != nil {
		t.Error(err)
	}
}

// TestCollectorBounded: a client that requests 100,000 distinct resources
// leaves the number of series where it was, and the heap too: the table
// holds its Size keys and the Collector exports its top.
func TestCollectorBounded(t *testing.T) {
	const size, top = 100, 5
	tab := newTable(t, size)
	col := NewCollector(tab, top)
	for i := range size {
		tab.Short(infoOf(t, "GET", fmt.Sprintf("/apis/example.com/v1/warmup%d", i)), kcmUA, &Outcome{Code: 200, Elapsed: time.Millisecond})
	}
	want := (top+1)*seriesPerKey + 2
	if got := countSeries(t, col); got != want {
		t.Fatalf("%d series before, want %d", got, want)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 100_000
	for i := range n {
		tab.Short(infoOf(t, "GET", fmt.Sprintf("/apis/example.com/v1/made-up-%d", i)), fmt.Sprintf("client%d/v1", i), &Outcome{Code: 200, Elapsed: time.Millisecond})
		if i%10_000 == 0 {
			if got := countSeries(t, col); got != want {
				t.Fatalf("%d series after %d distinct resources, want %d", got, i, want)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap %d → %d bytes (%+d) after %d distinct keys", before.HeapAlloc, after.HeapAlloc, grown, n)
	if grown > 1<<20 {
		t.Errorf("heap grew by %d bytes over %d distinct keys, want under 1 MiB: the table is not bounded", grown, n)
	}
	s := tab.Snapshot()
	var total int64
	for _, r := range s.Rows {
		total += r.Requests
	}
	if total != size+n || len(s.Rows) != size+1 {
		t.Errorf("%d requests in %d rows, want %d in %d", total, len(s.Rows), size+n, size+1)
	}
}

// TestCollectorSticky: an exported key stays exported against a
// slightly costlier one, and gives way to one that clearly overtakes it.
func TestCollectorSticky(t *testing.T) {
	tab := newTable(t, 10)
	col := NewCollector(tab, 1)
	a := infoOf(t, "GET", "/apis/example.com/v1/a")
	b := infoOf(t, "GET", "/apis/example.com/v1/b")
	exported := func() string {
		t.Helper()
		ch := make(chan prometheus.Metric, 100)
		col.Collect(ch)
		close(ch)
		for m := range ch {
			if strings.Contains(m.Desc().String(), "fanout_cost_requests_total") {
				if w := writeMetric(t, m); !strings.Contains(w, `"other"`) {
					return w
				}
			}
		}
		return ""
	}
	tab.Short(a, kcmUA, &Outcome{Code: 200, Elapsed: time.Second})
	if got := exported(); !strings.Contains(got, `value:"a"`) {
		t.Fatalf("exported %s, want a", got)
	}
	tab.Short(b, kcmUA, &Outcome{Code: 200, Elapsed: 1200 * time.Millisecond})
	if got := exported(); !strings.Contains(got, `value:"a"`) {
		t.Errorf("exported %s: b costs 20%% more than a and took its place", got)
	}
	tab.Short(b, kcmUA, &Outcome{Code: 200, Elapsed: 200 * time.Millisecond})
	if got := exported(); !strings.Contains(got, `value:"b"`) {
		t.Errorf("exported %s: b costs 40%% more than a and did not take its place", got)
	}
}

func writeMetric(t *testing.T, m prometheus.Metric) string {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.String()
}
