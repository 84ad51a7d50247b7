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
			di := DoneInfo{StatusCode: 200, Latency: 5 * time.Millisecond}
			b.ReportAllocs()
			for b.Loop() {
				p, err := bal.Pick(PickInfo{})
				if err != nil {
					b.Fatal(err)
				}
				p.Done(di)
			}
		})
	}
}
