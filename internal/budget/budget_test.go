package budget

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBytes: takes that fit are granted and mirrored in the gauge, one
// that does not is refused whole and counted, and many goroutines taking
// and giving at once never go past the limit and end at 0.
func TestBytes(t *testing.T) {
	used := prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"})
	exhausted := prometheus.NewCounter(prometheus.CounterOpts{Name: "exhausted"})
	b := New(100, used, exhausted)
	if !b.Take(60) || !b.Take(40) {
		t.Fatal("takes within the limit refused")
	}
	if b.Take(1) {
		t.Error("a take past the limit granted")
	}
	if b.Used() != 100 || testutil.ToFloat64(used) != 100 || testutil.ToFloat64(exhausted) != 1 {
		t.Errorf("used %d, gauge %v, exhausted %v; want 100, 100, 1", b.Used(), testutil.ToFloat64(used), testutil.ToFloat64(exhausted))
	}
	b.Give(100)

	var wg sync.WaitGroup
	var over sync.Once
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if b.Take(30) {
					if u := b.Used(); u > b.Limit() {
						over.Do(func() { t.Errorf("used %d, over the limit %d", u, b.Limit()) })
					}
					b.Give(30)
				}
			}
		})
	}
	wg.Wait()
	if b.Used() != 0 || testutil.ToFloat64(used) != 0 {
		t.Errorf("after every give: used %d, gauge %v; want 0", b.Used(), testutil.ToFloat64(used))
	}
}
