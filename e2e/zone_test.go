package e2e_test

import (
	"math"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestZonePlacement: the three apiservers labelled into two zones, a, a
// and b, through --endpoint-zones, and the clients' fanout in zone a
// (--zone=a). Shares are counted from the apiservers' audit logs per user.
//
//   - --zone-policy off (the default): the mixed workload spreads 33% ± 3
//     points on each, as without zones;
//   - same-zone-first: everything on the zone-a apiservers, nothing on b;
//   - under a steady load, spill-over with --zone-min-endpoints=1 and
//     same-zone-first with the default minimum (2) side by side; all up,
//     both keep everything in zone a; apiserver 2 (zone a) stopped
//     gracefully: spill-over keeps 3/4 on apiserver 1 and spills 1/4 to
//     apiserver 3 (Envoy's rule: zone a holds 1/2 of the capacity for 2/3
//     of the demand), same-zone-first, below its minimum, goes to both as
//     with the policy off (latency-aware, so 50% ± 20 points). Neither
//     client sees a failed request.
//
// How the zone's share divides between its two apiservers is the
// least-request policy's business (latency-aware), logged, not checked.
// fanout_zone_requests_total agrees with the audit logs.
func TestZonePlacement(t *testing.T) {
	// Its own control plane: an apiserver is stopped.
	ctx, cp := ownControlPlane(t, 15*time.Minute, harness.Options{})
	eps := cp.Endpoints()
	if len(eps) != 3 {
		t.Fatalf("%d apiservers, want 3", len(eps))
	}
	zoneArgs := []string{"--zone=a", "--endpoint-zones=" + eps[0] + "=a," + eps[1] + "=a," + eps[2] + "=b"}
	start := func(user, ns string, args ...string) *harness.Fanout {
		t.Helper()
		userNamespace(ctx, t, cp, ns, user)
		return userFanout(ctx, t, cp, user, append(append([]string(nil), zoneArgs...), args...)...)
	}

	t.Run("off", func(t *testing.T) {
		const user = "e2e-zone-off"
		f := start(user, "e2e-zone-off")
		res := mixed.run(ctx, t, f.Config, "e2e-zone-off")
		counts := served(t, cp, user, time.Time{}, time.Now().Add(time.Minute))
		t.Logf("policy off: %d requests + %d watches; served %s; %s; %s", res.requests, mixed.watches, harness.FormatShares(counts),
			fanoutMetricLines(t, f.AdminAddress, "fanout_retries_total"), fanoutMetricLines(t, f.AdminAddress, "fanout_upstream_dials_total"))
		checkServedAll(t, counts, res.requests+int64(mixed.watches))
		mixed.checkWatches(t, res)
		checkShares(t, "policy off", counts, []float64{oneThird, oneThird, oneThird}, 0.03)
		checkZoneMetric(t, f, counts, []bool{true, true, false})
	})

	t.Run("same-zone-first", func(t *testing.T) {
		const user = "e2e-zone-first"
		f := start(user, "e2e-zone-first", "--zone-policy=same-zone-first")
		res := mixed.run(ctx, t, f.Config, "e2e-zone-first")
		counts := served(t, cp, user, time.Time{}, time.Now().Add(time.Minute))
		t.Logf("same-zone-first: %d requests + %d watches; served %s; %s", res.requests, mixed.watches, harness.FormatShares(counts), fanoutMetricLines(t, f.AdminAddress, "fanout_retries_total"))
		checkServedAll(t, counts, res.requests+int64(mixed.watches))
		mixed.checkWatches(t, res)
		checkLocal(t, "same-zone-first", counts, 1, 0.01)
		checkZoneMetric(t, f, counts, []bool{true, true, false})
	})

	t.Run("apiserver of zone a stopped", func(t *testing.T) {
		const spillUser, firstUser = "e2e-zone-spill", "e2e-zone-first2"
		spill := start(spillUser, "e2e-zone-spill", "--zone-policy=spill-over", "--zone-min-endpoints=1")
		first := start(firstUser, "e2e-zone-first2", "--zone-policy=same-zone-first")
		spillLoad := startLoad(ctx, t, spill.Config, "e2e-zone-spill", "s")
		firstLoad := startLoad(ctx, t, first.Config, "e2e-zone-first2", "f")

		window := func(name string, wantSpill, tolSpill, wantFirst, tolFirst float64) (spilled, firsts []int) {
			t.Helper()
			from := time.Now()
			time.Sleep(20 * time.Second)
			to := time.Now()
			s, f := served(t, cp, spillUser, from, to), served(t, cp, firstUser, from, to)
			t.Logf("%s, in 20 s: spill-over served %s; same-zone-first served %s; retries: spill-over %s, same-zone-first %s", name,
				harness.FormatShares(s), harness.FormatShares(f),
				fanoutMetricLines(t, spill.AdminAddress, "fanout_retries_total"), fanoutMetricLines(t, first.AdminAddress, "fanout_retries_total"))
			checkLocal(t, name+", spill-over (min 1)", s, wantSpill, tolSpill)
			checkLocal(t, name+", same-zone-first (min 2)", f, wantFirst, tolFirst)
			return s, f
		}
		time.Sleep(3 * time.Second)
		window("all up", 1, 0.01, 1, 0.01)

		victim := cp.APIServers[1]
		stopped := time.Now()
		if err := victim.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("apiserver %d (zone a) stopped gracefully in %s", victim.Index+1, time.Since(stopped).Round(time.Millisecond))
		// The window starts once the apiserver has exited: from then on
		// fanout sees it refuse connections and its probes fail.
		s, f := window("apiserver 2 stopped", 0.75, 0.05, 0.5, 0.2)
		if s[1] != 0 || f[1] != 0 {
			t.Errorf("the stopped apiserver 2 served %d and %d requests", s[1], f[1])
		}

		spillLoad.Stop()
		firstLoad.Stop()
		t.Logf("spill-over client: %d requests, %d cycles failed; same-zone-first client: %d requests, %d cycles failed",
			spillLoad.sent.Load(), spillLoad.failed.Load(), firstLoad.sent.Load(), firstLoad.failed.Load())
		spillLoad.reportErrors(t)
		firstLoad.reportErrors(t)
		all := served(t, cp, spillUser, time.Time{}, time.Now().Add(time.Minute))
		checkZoneMetric(t, spill, all, []bool{true, true, false})
	})
}

const oneThird = 1.0 / 3

// served counts user's requests per apiserver whose audit timestamps fall
// within [from, to).
func served(t *testing.T, cp *harness.ControlPlane, user string, from, to time.Time) []int {
	t.Helper()
	counts, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
		return e.User.Username == user && !e.StageTimestamp.Before(from) && e.StageTimestamp.Before(to)
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// checkShares fails t unless each apiserver's share of counts is within
// tol of want.
func checkShares(t *testing.T, what string, counts []int, want []float64, tol float64) {
	t.Helper()
	shares := harness.Shares(counts)
	for i, s := range shares {
		if math.Abs(s-want[i]) > tol {
			t.Errorf("%s: apiserver %d served %.1f%%, want %.1f%% ± %.0f points (%s)", what, i+1, 100*s, 100*want[i], 100*tol, harness.FormatShares(counts))
		}
	}
}

// checkLocal fails t unless the zone-a apiservers' (1 and 2) share of
// counts is within tol of want.
func checkLocal(t *testing.T, what string, counts []int, want, tol float64) {
	t.Helper()
	shares := harness.Shares(counts)
	if local := shares[0] + shares[1]; math.Abs(local-want) > tol {
		t.Errorf("%s: zone a served %.1f%%, want %.1f%% ± %.0f points (%s)", what, 100*local, 100*want, 100*tol, harness.FormatShares(counts))
	}
}

// checkZoneMetric compares fanout's fanout_zone_requests_total with the
// audit logs' counts, local being the apiservers marked true. fanout
// counts requests when they end, the audit log when they are served, and
// the metric includes requests the apiservers do not log as served (a
// stopped apiserver's refusals): within 2% of the total.
func checkZoneMetric(t *testing.T, f *harness.Fanout, counts []int, local []bool) {
	t.Helper()
	var wantLocal, wantRemote float64
	for i, c := range counts {
		if local[i] {
			wantLocal += float64(c)
		} else {
			wantRemote += float64(c)
		}
	}
	l, errL := f.Metric("fanout_zone_requests_total", map[string]string{"locality": "local"})
	r, errR := f.Metric("fanout_zone_requests_total", map[string]string{"locality": "remote"})
	if errL != nil || errR != nil {
		t.Fatalf("reading fanout_zone_requests_total: %v %v", errL, errR)
	}
	slack := 0.02*(wantLocal+wantRemote) + 2
	t.Logf("fanout_zone_requests_total: local %v, remote %v; the audit logs: local %v, remote %v", l, r, wantLocal, wantRemote)
	if math.Abs(l-wantLocal) > slack || math.Abs(r-wantRemote) > slack {
		t.Errorf("fanout_zone_requests_total local %v, remote %v; want %v and %v from the audit logs (± %.0f)", l, r, wantLocal, wantRemote, slack)
	}
}
