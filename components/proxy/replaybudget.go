package proxy

// The replay budget (Handler.replay, a budget.Bytes) bounds the request
// bodies kept in memory for retries, all requests together.
// MaxReplayBody bounds one body; without a bound on the sum, 5,000
// requests in flight (--max-inflight plus --max-long-running) could hold
// 5 GiB of them. A body that finds the budget spent streams through once
// and is never sent again (outBody.replayable is false), as a body over
// MaxReplayBody does; the refusal is counted in
// fanout_replay_budget_exhausted_total.
//
// A request takes budget as its buffer grows (readReplayable) and gives it
// all back once, when the request ends (Handler.releaseReplay).

// releaseReplay gives back the budget st's body holds, once: every path
// that ends a request calls it (ServeHTTP's defer, which also runs when the
// reverse proxy panics with http.ErrAbortHandler; the RoundTripper's
// finish; the forwarder itself for a request that arrived without its
// state), and only the first finds anything to give.
func (h *Handler) releaseReplay(st *reqState) {
	h.replay.Give(st.replayHeld.Swap(0))
}
