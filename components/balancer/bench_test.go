package balancer

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPickParallel measures Pick+Done from all Ps over 3 endpoints
// with the real clock and rand, as the proxy calls them.
func BenchmarkPickParallel(b *testing.B) {
	for _, pol := range policies {
		for _, kind := range []Kind{Short, Long} {
			b.Run(fmt.Sprintf("%s/%s", pol, kind), func(b *testing.B) {
				bal, err := New(Config{Policy: pol})
				if err != nil {
					b.Fatal(err)
				}
				bal.Update(endpoints("10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"))
				di := DoneInfo{StatusCode: 200, Latency: 5 * time.Millisecond}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						p, err := bal.Pick(PickInfo{Kind: kind})
						if err != nil {
							b.Error(err)
							return
						}
						p.Done(di)
					}
				})
			})
		}
	}
}

// BenchmarkPick is Pick+Done on one goroutine: the cost without contention.
func BenchmarkPick(b *testing.B) {
	for _, pol := range policies {
		b.Run(pol, func(b *testing.B) {
			bal, err := New(Config{Policy: pol})
			if err != nil {
				b.Fatal(err)
			}
			bal.Update(endpoints("10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"))
			loopPick(b, bal)
		})
	}
}

// loopPick is the body of the single-goroutine benchmarks.
func loopPick(b *testing.B, bal *Balancer) {
	di := DoneInfo{StatusCode: 200, Latency: 5 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		p, err := bal.Pick(PickInfo{})
		if err != nil {
			b.Fatal(err)
		}
		p.Done(di)
	}
}

// BenchmarkPickZone is BenchmarkPick under the zone policies, over a,a,b
// with fanout in a: same-zone-first and spill-over with all usable, and
// spill-over with one local endpoint ejected, where every short request
// draws its zone.
func BenchmarkPickZone(b *testing.B) {
	for _, tc := range []struct {
		name, policy string
		eject        bool
	}{
		{"same-zone-first", ZonePolicySameZoneFirst, false},
		{"spill-over", ZonePolicySpillOver, false},
		{"spill-over-deficit", ZonePolicySpillOver, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bal, err := New(Config{Zone: "a", ZonePolicy: tc.policy, ZoneMinEndpoints: 1})
			if err != nil {
				b.Fatal(err)
			}
			bal.Update(endpoints("10.0.0.1:6443@a", "10.0.0.2:6443@a", "10.0.0.3:6443@b"))
			if tc.eject {
				ejectOnly(b, bal, "10.0.0.2:6443")
			}
			loopPick(b, bal)
		})
	}
}
