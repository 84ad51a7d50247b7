package balancer

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestCollector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1")
		c := b.Collector()

		// Empty of requests: every series at zero, both endpoints ready, the
		// estimate at its seed.
		want := `
# HELP fanout_endpoint_inflight_requests Requests in flight to the kube-apiserver endpoint, by kind (short or long-running).
# TYPE fanout_endpoint_inflight_requests gauge
fanout_endpoint_inflight_requests{endpoint="a:1",kind="long"} 0
fanout_endpoint_inflight_requests{endpoint="a:1",kind="short"} 0
fanout_endpoint_inflight_requests{endpoint="b:1",kind="long"} 0
fanout_endpoint_inflight_requests{endpoint="b:1",kind="short"} 0
# HELP fanout_endpoint_latency_score Peak-EWMA estimate of the endpoint's latency to response headers for short requests, relative to the usual latency of the same request class on any endpoint (1 = usual, 2 = twice as slow).
# TYPE fanout_endpoint_latency_score gauge
fanout_endpoint_latency_score{endpoint="a:1"} 1
fanout_endpoint_latency_score{endpoint="b:1"} 1
` + endpointsSeries(0, 0, 0, 2)
		if err := testutil.CollectAndCompare(c, strings.NewReader(want),
			"fanout_endpoint_inflight_requests", "fanout_endpoint_latency_score", "fanout_latency_baseline_seconds", "fanout_endpoints"); err != nil {
			t.Error(err)
		}

		// Two short and one long request in flight somewhere, b ejected after
		// a failure, and a 500 with a 30ms latency on a.
		var held []Pick
		for _, k := range []Kind{Short, Short, Long} {
			p, _ := b.Pick(PickInfo{Kind: k})
			held = append(held, p)
		}
		ejectAll(t, b, "b:1")
		for {
			p, _ := b.Pick(PickInfo{})
			if p.Endpoint.Address() == "a:1" {
				p.Done(DoneInfo{StatusCode: 500, Latency: 30 * time.Millisecond})
				break
			}
			p.Done(DoneInfo{StatusCode: 200})
		}

		want = `
# HELP fanout_endpoint_ready 1 if the endpoint is eligible for picks, 0 while it is ejected, failing its readiness probe or draining.
# TYPE fanout_endpoint_ready gauge
fanout_endpoint_ready{endpoint="a:1"} 1
fanout_endpoint_ready{endpoint="b:1"} 0
` + endpointsSeries(0, 1, 0, 1)
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "fanout_endpoint_ready", "fanout_endpoints"); err != nil {
			t.Error(err)
		}

		// The other series must match Status, which the tests above pin down.
		// 7 per endpoint, 4 of fanout_endpoints, 2 of fanout_zone_requests_total,
		// 1 of fanout_skew_routed_total.
		if n := testutil.CollectAndCount(c); n != 2*7+4+2+1 {
			t.Errorf("collected %d series, want %d", n, 2*7+4+2+1)
		}
		var inflight float64
		for _, s := range b.Endpoints() {
			inflight += float64(s.InflightShort + s.InflightLong)
			one := func(name string) float64 {
				t.Helper()
				return onlySeries(t, c, name, s.Address)
			}
			if got := one("fanout_endpoint_requests_total"); got != float64(s.RequestsTotal) {
				t.Errorf("%s requests_total = %v, want %d", s.Address, got, s.RequestsTotal)
			}
			if got := one("fanout_endpoint_errors_total"); got != float64(s.ErrorsTotal) {
				t.Errorf("%s errors_total = %v, want %d", s.Address, got, s.ErrorsTotal)
			}
			if got := one("fanout_endpoint_latency_score"); got != s.LatencyScore {
				t.Errorf("%s latency score = %v, want %v", s.Address, got, s.LatencyScore)
			}
		}
		if inflight != 3 {
			t.Errorf("in flight across endpoints = %v, want 3", inflight)
		}
		if a, b := onlySeries(t, c, "fanout_endpoint_ejections_total", "a:1"), onlySeries(t, c, "fanout_endpoint_ejections_total", "b:1"); a != 0 || b != 1 {
			t.Errorf("ejections_total a:1 = %v, b:1 = %v; want 0 and 1 (b was ejected once)", a, b)
		}
		if got := onlySeries(t, c, "fanout_endpoint_errors_total", "a:1"); got != 1 {
			t.Errorf("a:1 errors_total = %v, want 1 (the 500)", got)
		}
		if got := onlySeries(t, c, "fanout_endpoint_latency_score", "a:1"); got < penaltyFactor {
			t.Errorf("a:1 latency score = %v, want at least the %d of a penalty", got, penaltyFactor)
		}
		for _, p := range held {
			p.Done(DoneInfo{StatusCode: 200})
		}

		// A successful short request of a class gives that class a baseline;
		// failures (the 500 above) give none.
		p, _ := b.Pick(PickInfo{Class: ClassList})
		p.Done(DoneInfo{StatusCode: 200, Latency: 250 * time.Millisecond})
		want = `
# HELP fanout_latency_baseline_seconds Usual latency to response headers of a successful short request, by request class (verb); the unit of fanout_endpoint_latency_score. Absent until the class has been seen.
# TYPE fanout_latency_baseline_seconds gauge
fanout_latency_baseline_seconds{class="list"} 0.25
`
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "fanout_latency_baseline_seconds"); err != nil {
			t.Error(err)
		}

		// A removed endpoint's series disappear.
		b.Update(endpoints("a:1"))
		if n := testutil.CollectAndCount(c, "fanout_endpoint_ready"); n != 1 {
			t.Errorf("after removing b: %d fanout_endpoint_ready series, want 1", n)
		}

		// The collector registers cleanly (consistent descriptors).
		if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
			t.Errorf("Register: %v", err)
		}
	})
}

// endpointsSeries is fanout_endpoints as the collector exposes it, with
// the number of endpoints in each state.
func endpointsSeries(draining, ejected, notReady, ready int) string {
	return fmt.Sprintf(`# HELP fanout_endpoints Known kube-apiserver endpoints by state (ready, ejected, not_ready: failing its readiness probe, or draining: terminating per the resolver).
# TYPE fanout_endpoints gauge
fanout_endpoints{state="draining"} %d
fanout_endpoints{state="ejected"} %d
fanout_endpoints{state="not_ready"} %d
fanout_endpoints{state="ready"} %d
`, draining, ejected, notReady, ready)
}

// onlySeries returns the value of metric name for one endpoint; it fails
// t if there is no such series.
func onlySeries(t *testing.T, c prometheus.Collector, name, endpoint string) float64 {
	t.Helper()
	v, ok := testkit.Series(t, testkit.Registry(t, c), name, map[string]string{"endpoint": endpoint})
	if !ok {
		t.Fatalf("no %s series for %s", name, endpoint)
	}
	return v
}
