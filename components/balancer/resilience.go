package balancer

import (
	"math"
)

// This file holds the endpoint state that protects apiservers in trouble:
// the shutdown hold, the overload penalty, passive outlier detection and
// slow start. Like the rest of Endpoint it is all atomics; see Config for
// the settings.

// down reports whether the endpoint must get no new requests on the
// apiserver's own word: its readiness probe fails, discovery says it is
// draining, or it answered "shutting down" less than DrainHold ago. Unlike
// a passive ejection, this is never capped by MaxEjectedFraction.
func (e *Endpoint) down(now int64) bool {
	return e.notReady.Load() || e.draining.Load() || e.shutdownUntil.Load() > now
}

// overloaded reports whether the endpoint rejected a request for overload
// less than OverloadPenalty ago.
func (e *Endpoint) overloaded(now int64) bool { return e.overloadedUntil.Load() > now }

// raiseTo moves a deadline forward to until, never back.
func raiseTo(deadline interface {
	Load() int64
	CompareAndSwap(old, new int64) bool
}, until int64) {
	for {
		old := deadline.Load()
		if until <= old || deadline.CompareAndSwap(old, until) {
			return
		}
	}
}

// drainFor takes the endpoint out for DrainHold after a shutdown answer.
func (e *Endpoint) drainFor(now int64) { raiseTo(&e.shutdownUntil, now+e.p.drainHold) }

// overloadFor penalises the endpoint for OverloadPenalty after an overload
// rejection.
func (e *Endpoint) overloadFor(now int64) { raiseTo(&e.overloadedUntil, now+e.p.overloadPenalty) }

// failed records one DoneInfo.Failed result: ConsecutiveFailures in a row
// eject the endpoint. The streak restarts after each ejection, so an
// endpoint that keeps failing once back is ejected again after as many
// failures, for twice as long.
func (e *Endpoint) failed(now int64) {
	e.failures.Add(1)
	if e.streak.Add(1) < e.p.consecutive {
		return
	}
	e.streak.Store(0)
	e.failures.Add(-1) // eject counts this one
	e.eject(now)
}

// weight is the endpoint's slow-start weight at now, in
// [SlowStartMinWeight, 1]: it grows linearly over SlowStart from the
// moment the endpoint last became usable, the latest of upSince and the
// ends of its ejection and shutdown hold.
func (e *Endpoint) weight(now int64) float64 {
	if e.p.slowStart <= 0 {
		return 1
	}
	start := e.usableSince()
	elapsed := float64(now - start)
	if elapsed >= e.p.slowStart {
		return 1
	}
	return math.Max(e.p.slowMin, math.Max(elapsed, 0)/e.p.slowStart)
}

// markUp restarts slow start when a flag that kept the endpoint out is
// lifted; wasOut is the flag's previous value.
func (e *Endpoint) markUp(wasOut bool, now int64) {
	if wasOut {
		e.upSince.Store(now)
	}
}

// ejectionCap is how many endpoints of n may be passively ejected at once:
// fraction × n rounded up (with a little slack for 1/3 × 3 computed in
// floating point).
func ejectionCap(fraction float64, n int) int {
	return int(math.Ceil(fraction*float64(n) - 1e-9))
}

// usableSince is when the endpoint last became usable, as far as the
// balancer has seen.
func (e *Endpoint) usableSince() int64 {
	return max(e.upSince.Load(), e.ejectedUntil.Load(), e.shutdownUntil.Load())
}

// oldest returns the candidate usable longest; ties go to the one with
// fewer open long requests, then to the first in address order.
func oldest(c candidates) *Endpoint {
	var best *Endpoint
	for _, e := range c.eps {
		if !c.usable(e) {
			continue
		}
		if best == nil {
			best = e
			continue
		}
		bs, es := best.usableSince(), e.usableSince()
		if es < bs || (es == bs && e.inflight[1].Load() < best.inflight[1].Load()) {
			best = e
		}
	}
	if best == nil {
		return c.at(0)
	}
	return best
}
