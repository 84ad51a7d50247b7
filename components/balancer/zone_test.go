package balancer

import (
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/resolver"
)

// newZoned returns a balancer over eps with a seeded rand. Call it in a
// synctest bubble, as newTest.
func newZoned(t testing.TB, cfg Config, eps []resolver.Endpoint) *Balancer {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = seeded(7)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.Update(eps)
	return b
}

// shortShares picks n short requests one after the other, each done at
// once, and returns each address's fraction.
func shortShares(t testing.TB, b *Balancer, n int) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for range n {
		p, err := b.Pick(PickInfo{Kind: Short, Class: ClassGet})
		if err != nil {
			t.Fatal(err)
		}
		got[p.Endpoint.Address()] += 1 / float64(n)
		p.Done(DoneInfo{StatusCode: 200, Latency: time.Millisecond})
	}
	return got
}

// watchShares opens n long requests and returns each address's
// fraction; the requests stay open until the test ends.
func watchShares(t testing.TB, b *Balancer, n int) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for range n {
		p, err := b.Pick(PickInfo{Kind: Long})
		if err != nil {
			t.Fatal(err)
		}
		got[p.Endpoint.Address()] += 1 / float64(n)
		t.Cleanup(func() { p.Done(DoneInfo{StatusCode: 200}) })
	}
	return got
}

// loadShares is WatchLoads' Share by address.
func loadShares(b *Balancer) map[string]float64 {
	got := map[string]float64{}
	for _, l := range b.WatchLoads() {
		got[l.Address] = l.Share
	}
	return got
}

func near(got, want map[string]float64, tol float64) bool {
	for a, w := range want {
		if math.Abs(got[a]-w) > tol {
			return false
		}
	}
	for a, g := range got {
		if _, ok := want[a]; !ok && g > tol {
			return false
		}
	}
	return true
}

const third = 1.0 / 3

// checkZoneShares checks b's target shares (exact), and the shares of
// 10,000 short requests and of 300 watches (within 2 points), against want.
func checkZoneShares(t *testing.T, b *Balancer, want map[string]float64) {
	t.Helper()
	if got := loadShares(b); !near(got, want, 1e-9) {
		t.Errorf("target shares %v, want %v", got, want)
	}
	if got := shortShares(t, b, 10000); !near(got, want, 0.02) {
		t.Errorf("short requests went %v, want %v ± 2 points", got, want)
	}
	if got := watchShares(t, b, 300); !near(got, want, 0.02) {
		t.Errorf("watches went %v, want %v ± 2 points", got, want)
	}
}

// TestZoneShares: the share of each apiserver under each policy, for the
// zone layouts of issue 34, fanout in zone a. The target (WatchLoads'
// Share) is exact; short requests (P2C within the zone, 30,000 picks)
// and watches (placement alone) follow it within 2 points.
func TestZoneShares(t *testing.T) {
	even3 := map[string]float64{"a1:1": third, "a2:1": third, "x:1": third}
	cases := []struct {
		name   string
		zone   string
		eps    []resolver.Endpoint
		policy string
		min    int
		want   map[string]float64
	}{
		{"a,a,b off", "a", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicyOff, 2, even3},
		{"a,a,b same-zone-first", "a", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicySameZoneFirst, 2, map[string]float64{"a1:1": .5, "a2:1": .5, "x:1": 0}},
		{"a,a,b spill-over", "a", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicySpillOver, 2, map[string]float64{"a1:1": .5, "a2:1": .5, "x:1": 0}},
		{"a,a,b same-zone-first, min 3", "a", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicySameZoneFirst, 3, even3},
		// One apiserver per zone: never pinned to it by default...
		{"a,b,c off", "a", endpoints("a1:1@a", "x:1@b", "y:1@c"), ZonePolicyOff, 2, map[string]float64{"a1:1": third, "x:1": third, "y:1": third}},
		{"a,b,c same-zone-first", "a", endpoints("a1:1@a", "x:1@b", "y:1@c"), ZonePolicySameZoneFirst, 2, map[string]float64{"a1:1": third, "x:1": third, "y:1": third}},
		{"a,b,c spill-over", "a", endpoints("a1:1@a", "x:1@b", "y:1@c"), ZonePolicySpillOver, 2, map[string]float64{"a1:1": third, "x:1": third, "y:1": third}},
		// ...unless --zone-min-endpoints 1 says so.
		{"a,b,c same-zone-first, min 1", "a", endpoints("a1:1@a", "x:1@b", "y:1@c"), ZonePolicySameZoneFirst, 1, map[string]float64{"a1:1": 1}},
		{"a,b,c spill-over, min 1", "a", endpoints("a1:1@a", "x:1@b", "y:1@c"), ZonePolicySpillOver, 1, map[string]float64{"a1:1": 1}},
		{"a only same-zone-first", "a", endpoints("a1:1@a", "a2:1@a", "x:1@a"), ZonePolicySameZoneFirst, 2, even3},
		{"a only spill-over", "a", endpoints("a1:1@a", "a2:1@a", "x:1@a"), ZonePolicySpillOver, 2, even3},
		{"own zone unknown, same-zone-first", "", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicySameZoneFirst, 2, even3},
		{"own zone unknown, spill-over", "", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicySpillOver, 2, even3},
		{"endpoints' zones unknown, spill-over", "a", endpoints("a1:1", "a2:1", "x:1"), ZonePolicySpillOver, 2, even3},
		{"no endpoint in the own zone, same-zone-first", "c", endpoints("a1:1@a", "a2:1@a", "x:1@b"), ZonePolicySameZoneFirst, 1, even3},
	}
	for _, tc := range cases {
		for _, pol := range policies {
			t.Run(tc.name+"/"+pol, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					cfg := Config{Policy: pol, Zone: tc.zone, ZonePolicy: tc.policy, ZoneMinEndpoints: tc.min}
					checkZoneShares(t, newZoned(t, cfg, tc.eps), tc.want)
				})
			})
		}
	}
}

// ejectOnly ejects addr with one Unavailable result.
func ejectOnly(t testing.TB, b *Balancer, addr string) {
	t.Helper()
	p, err := b.Pick(PickInfo{Only: addr})
	if err != nil {
		t.Fatal(err)
	}
	p.Done(DoneInfo{Err: errTest, Unavailable: true})
}

// TestZoneLocalEndpointsDown: losing local apiservers moves traffic at
// once, within each policy's rule. a,a,b with fanout in a.
func TestZoneLocalEndpointsDown(t *testing.T) {
	cases := []struct {
		name   string
		policy string
		min    int
		down   func(t testing.TB, b *Balancer)
		want   map[string]float64
	}{
		// Below the minimum the zone is not preferred: even over what is left.
		{"one ejected, same-zone-first", ZonePolicySameZoneFirst, 2, func(t testing.TB, b *Balancer) { ejectOnly(t, b, "a2:1") }, map[string]float64{"a1:1": .5, "x:1": .5}},
		{"one ejected, spill-over", ZonePolicySpillOver, 2, func(t testing.TB, b *Balancer) { ejectOnly(t, b, "a2:1") }, map[string]float64{"a1:1": .5, "x:1": .5}},
		{"one ejected, same-zone-first, min 1", ZonePolicySameZoneFirst, 1, func(t testing.TB, b *Balancer) { ejectOnly(t, b, "a2:1") }, map[string]float64{"a1:1": 1}},
		// Envoy's rule: the local zone holds 1/2 of the capacity for 2/3
		// of the demand, so 3/4 stays and the deficit, 1/4, spills.
		{"one ejected, spill-over, min 1", ZonePolicySpillOver, 1, func(t testing.TB, b *Balancer) { ejectOnly(t, b, "a2:1") }, map[string]float64{"a1:1": .75, "x:1": .25}},
		{"one not ready, spill-over, min 1", ZonePolicySpillOver, 1, func(t testing.TB, b *Balancer) { b.SetReady("a2:1", false) }, map[string]float64{"a1:1": .75, "x:1": .25}},
		// A zone whose endpoints are all down is skipped at once.
		{"both ejected, same-zone-first, min 1", ZonePolicySameZoneFirst, 1, func(t testing.TB, b *Balancer) { ejectOnly(t, b, "a1:1"); ejectOnly(t, b, "a2:1") }, map[string]float64{"x:1": 1}},
		{"both not ready, spill-over, min 1", ZonePolicySpillOver, 1, func(t testing.TB, b *Balancer) { b.SetReady("a1:1", false); b.SetReady("a2:1", false) }, map[string]float64{"x:1": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{Zone: "a", ZonePolicy: tc.policy, ZoneMinEndpoints: tc.min}
				b := newZoned(t, cfg, endpoints("a1:1@a", "a2:1@a", "x:1@b"))
				tc.down(t, b)
				checkZoneShares(t, b, tc.want)
			})
		})
	}
}

// TestZoneRetryStaysInZone: a request retried away from a local
// apiserver (PickInfo.Avoid) goes to the other local one: the zone is
// judged with the avoided endpoint, which is still usable, so one retry
// does not drop the zone below its minimum. With no other local
// endpoint it leaves the zone.
func TestZoneRetryStaysInZone(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		min          int
		eps          []resolver.Endpoint
		want         map[string]float64
	}{
		{"same-zone-first", ZonePolicySameZoneFirst, 2, endpoints("a1:1@a", "a2:1@a", "x:1@b"), map[string]float64{"a2:1": 1}},
		{"spill-over", ZonePolicySpillOver, 2, endpoints("a1:1@a", "a2:1@a", "x:1@b"), map[string]float64{"a2:1": 1}},
		{"alone in its zone", ZonePolicySameZoneFirst, 1, endpoints("a1:1@a", "x:1@b", "y:1@c"), map[string]float64{"x:1": .5, "y:1": .5}},
	} {
		for _, kind := range []Kind{Short, Long} {
			t.Run(tc.name+"/"+kind.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newZoned(t, Config{Zone: "a", ZonePolicy: tc.policy, ZoneMinEndpoints: tc.min}, tc.eps)
					got := map[string]float64{}
					for range 1000 {
						p, err := b.Pick(PickInfo{Kind: kind, Avoid: "a1:1"})
						if err != nil {
							t.Fatal(err)
						}
						got[p.Endpoint.Address()] += 1.0 / 1000
						p.Done(DoneInfo{StatusCode: 200, Latency: time.Millisecond})
					}
					// Ties among idle watches go by a random start of the
					// scan, which favours the endpoint after the avoided one.
					if !near(got, tc.want, 0.2) {
						t.Errorf("retries avoiding a1 went %v, want %v", got, tc.want)
					}
				})
			})
		}
	}
}

// TestZoneSpillProportionalToDeficit: three zones a,a,a,b,b,c (demand
// 1/2, 1/3, 1/6), one a ejected. The local zone holds 2/5 of the
// capacity for 1/2 of the demand: 4/5 stays, and the 1/5 that spills is
// split by the remote zones' residual capacity, b 2/5-1/3 = 1/15 and c
// 1/5-1/6 = 1/30, so 2:1. Every apiserver then serves the fleet evenly:
// zone a's clients put 1/2 × 4/5 / 2 = 1/5 on each a, and 1/2 × 2/15 / 2
// = 1/30 on each b; b's own clients 1/3 / 2 = 1/6; 1/30 + 1/6 = 1/5.
func TestZoneSpillProportionalToDeficit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Zone: "a", ZonePolicy: ZonePolicySpillOver, ZoneMinEndpoints: 1}
		b := newZoned(t, cfg, endpoints("a1:1@a", "a2:1@a", "a3:1@a", "b1:1@b", "b2:1@b", "c1:1@c"))
		ejectOnly(t, b, "a3:1")
		want := map[string]float64{"a1:1": .4, "a2:1": .4, "b1:1": 1.0 / 15, "b2:1": 1.0 / 15, "c1:1": 1.0 / 15}
		if got := loadShares(b); !near(got, want, 1e-9) {
			t.Errorf("target shares %v, want %v", got, want)
		}
		if got := shortShares(t, b, 10000); !near(got, want, 0.02) {
			t.Errorf("short requests went %v, want %v ± 2 points", got, want)
		}
		// Nothing lost: with all back the zone keeps everything again.
		b.Update(endpoints("a1:1@a", "a2:1@a", "b1:1@b", "b2:1@b", "c1:1@c"))
		want = map[string]float64{"a1:1": .5, "a2:1": .5}
		// 2/5 of the capacity for 2/5 of the demand: nothing spills.
		if got := loadShares(b); !near(got, want, 1e-9) {
			t.Errorf("after removing a3: target shares %v, want %v", got, want)
		}
	})
}

// TestZoneOverloadSpills: an overload penalty counts against the zone's
// capacity, so spill-over sends part of the traffic away from a zone
// whose apiservers turn requests away.
func TestZoneOverloadSpills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Zone: "a", ZonePolicy: ZonePolicySpillOver, ZoneMinEndpoints: 1}
		b := newZoned(t, cfg, endpoints("a1:1@a", "a2:1@a", "x:1@b"))
		for _, a := range []string{"a1:1", "a2:1"} {
			p, err := b.Pick(PickInfo{Only: a})
			if err != nil {
				t.Fatal(err)
			}
			p.Done(DoneInfo{StatusCode: 429, Overloaded: true, Latency: time.Millisecond})
		}
		// Capacity a = 2/4, b = 1: u = 1/3 for d = 2/3, so half stays.
		want := map[string]float64{"a1:1": .25, "a2:1": .25, "x:1": .5}
		if got := loadShares(b); !near(got, want, 1e-9) {
			t.Errorf("target shares %v, want %v", got, want)
		}
	})
}

// TestZoneRequestsMetric: fanout_zone_requests_total counts finished
// requests by locality, keeps the counts of removed endpoints, and counts
// nothing while the own zone is unknown.
func TestZoneRequestsMetric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newZoned(t, Config{Zone: "a"}, endpoints("a1:1@a", "x:1@b"))
		done := func(addr string, n int) {
			for range n {
				p, err := b.Pick(PickInfo{Only: addr})
				if err != nil {
					t.Fatal(err)
				}
				p.Done(DoneInfo{StatusCode: 200, Latency: time.Millisecond})
			}
		}
		done("a1:1", 3)
		done("x:1", 2)
		b.Update(endpoints("a1:1@a")) // x leaves with its 2
		done("a1:1", 1)
		b.Update(endpoints("a1:1@c")) // a1 moves out of the zone: its 4 stay local
		done("a1:1", 5)
		want := `
# HELP fanout_zone_requests_total Finished requests by the locality of the kube-apiserver that served them: local (in fanout's own zone, --zone) or remote. Nothing is counted while fanout's zone is unknown.
# TYPE fanout_zone_requests_total counter
fanout_zone_requests_total{locality="local"} 4
fanout_zone_requests_total{locality="remote"} 7
`
		if err := testutil.CollectAndCompare(b.Collector(), strings.NewReader(want), "fanout_zone_requests_total"); err != nil {
			t.Error(err)
		}

		unknown := newZoned(t, Config{}, endpoints("a1:1@a"))
		p, _ := unknown.Pick(PickInfo{})
		p.Done(DoneInfo{StatusCode: 200})
		if err := testutil.CollectAndCompare(unknown.Collector(), strings.NewReader(strings.NewReplacer(" 4\n", " 0\n", " 7\n", " 0\n").Replace(want)), "fanout_zone_requests_total"); err != nil {
			t.Errorf("zone unknown: %v", err)
		}
	})
}

func TestZoneValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ZonePolicy: "nearest"}, "--zone-policy"},
		{Config{ZonePolicy: ZonePolicySpillOver}, "--zone-min-endpoints"},
		{Config{Zone: "eu west"}, "--zone"},
		{Config{Zone: strings.Repeat("a", 64)}, "--zone"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	for _, z := range []string{"", "a", "eu-west-1a", "zone_1.b"} {
		if err := (Config{Zone: z, ZonePolicy: ZonePolicySameZoneFirst, ZoneMinEndpoints: 1}).Validate(); err != nil {
			t.Errorf("zone %q: %v", z, err)
		}
	}
}
