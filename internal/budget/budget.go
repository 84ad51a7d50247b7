// Package budget is a byte budget shared by every request of a process:
// memory that a hostile client could otherwise make fanout hold per item
// (a body kept for retries, a request header) is bounded in sum
// (docs/security.md, "The sum of the memory bounds").
package budget

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Bytes is a budget of limit bytes. Take reserves, Give returns; what was
// taken and not given is in use. It is safe for concurrent use; the zero
// value refuses everything.
type Bytes struct {
	limit int64
	used  atomic.Int64
	// inUse mirrors used (a *_budget_used_bytes gauge); exhausted counts
	// the refusals (a *_budget_exhausted_total counter). Either may be
	// nil.
	inUse     prometheus.Gauge
	exhausted prometheus.Counter
}

// New returns a budget of limit bytes whose use is mirrored in inUse and
// whose refusals are counted in exhausted (either may be nil).
func New(limit int64, inUse prometheus.Gauge, exhausted prometheus.Counter) *Bytes {
	return &Bytes{limit: limit, inUse: inUse, exhausted: exhausted}
}

// Take reserves n bytes and reports whether they fitted; nothing is
// reserved when they did not, and the refusal is counted.
func (b *Bytes) Take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			if b.exhausted != nil {
				b.exhausted.Inc()
			}
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			if b.inUse != nil {
				b.inUse.Add(float64(n))
			}
			return true
		}
	}
}

// Give returns n bytes taken earlier.
func (b *Bytes) Give(n int64) {
	if n != 0 {
		b.used.Add(-n)
		if b.inUse != nil {
			b.inUse.Sub(float64(n))
		}
	}
}

// Used is how many bytes are taken now.
func (b *Bytes) Used() int64 { return b.used.Load() }

// Limit is the budget's size.
func (b *Bytes) Limit() int64 { return b.limit }
