package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// replayBudget bounds the request bodies kept in memory for retries, all
// requests together. MaxReplayBody bounds one body; without a bound on the
// sum, 5,000 requests in flight (--max-inflight plus --max-long-running)
// could hold 5 GiB of them. A body that finds the budget spent streams
// through once and is never sent again (outBody.replayable is false), as a
// body over MaxReplayBody does.
//
// A request takes budget as its buffer grows (readReplayable) and gives it
// all back once, when the request ends (Handler.releaseReplay). It is safe
// for concurrent use.
type replayBudget struct {
	limit int64
	used  atomic.Int64
	// inUse mirrors used (fanout_replay_budget_used_bytes); streamed
	// counts the bodies sent without replay because the budget was spent
	// (fanout_replay_budget_exhausted_total).
	inUse    prometheus.Gauge
	streamed prometheus.Counter
}

// take reserves n bytes and reports whether they fitted; nothing is
// reserved when they did not.
func (b *replayBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			b.inUse.Add(float64(n))
			return true
		}
	}
}

// give returns n bytes taken earlier.
func (b *replayBudget) give(n int64) {
	if n != 0 {
		b.used.Add(-n)
		b.inUse.Sub(float64(n))
	}
}

// releaseReplay gives back the budget st's body holds, once: every path
// that ends a request calls it (ServeHTTP's defer, which also runs when the
// reverse proxy panics with http.ErrAbortHandler; the RoundTripper's
// finish; the forwarder itself for a request that arrived without its
// state), and only the first finds anything to give.
func (h *Handler) releaseReplay(st *reqState) {
	h.replay.give(st.replayHeld.Swap(0))
}
