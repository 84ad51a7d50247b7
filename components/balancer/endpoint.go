package balancer

import (
	"math"
	"sync/atomic"
	"time"
)

// Endpoint state values reported by EndpointStatus.State.
const (
	StateReady   = "ready"
	StateEjected = "ejected"
)

const (
	// defaultEstimate seeds the latency estimate when nothing is known yet:
	// the order of a kube-apiserver GET. Every endpoint of a first snapshot
	// starts from it, so it only sets the scale, not an order.
	defaultEstimate = 10 * time.Millisecond
	// minEstimate is the floor of the latency used in the cost, so that an
	// estimate decayed towards zero still lets the in-flight count weigh.
	minEstimate = 100 * time.Microsecond
	// penaltyFactor, penaltyMin and penaltyMax shape the sample fed for a
	// fast failure, see observe.
	penaltyFactor = 4
	penaltyMin    = 10 * time.Millisecond
	penaltyMax    = time.Second
)

// params are the per-Balancer settings its endpoints need in Done.
type params struct {
	now       func() time.Time
	decay     float64 // DecayTime in nanoseconds
	ejectBase time.Duration
	ejectMax  time.Duration
}

func (p *params) nowNanos() int64 { return p.now().UnixNano() }

// Endpoint is the state of one kube-apiserver, keyed by address. The
// Balancer keeps the same *Endpoint for an address across updates, so
// counters and the latency estimate survive resolver churn.
//
// An Endpoint must not be copied: every field is an atomic shared by the
// requests in flight. All methods are safe for concurrent use.
type Endpoint struct {
	address string
	p       *params

	// inflight is indexed by kindIndex: short requests, long requests.
	inflight [2]atomic.Int64
	requests atomic.Uint64
	errors   atomic.Uint64

	// latency is the peak-EWMA estimate in nanoseconds as of latencyAt
	// (unix nanoseconds). Readers decay it to their own "now" without
	// writing, see estimate. The two words are not updated together; a
	// reader that sees a new stamp with an old value only misses the decay
	// of a few microseconds.
	latency   atomic.Int64
	latencyAt atomic.Int64

	// recent counts short requests finished, decayed with the same time
	// constant as the latency (float64 bits, as of recentAt). It breaks
	// ties between equally cheap endpoints; unlike requests it forgets, so
	// an endpoint back from a long ejection or a fresh one is favoured
	// for seconds, not until it has caught up with its peers' lifetime
	// totals.
	recent   atomic.Uint64
	recentAt atomic.Int64

	// ejectedUntil is in unix nanoseconds; the endpoint is skipped while
	// it is in the future. failures counts consecutive Unavailable results
	// and sets the length of the next ejection.
	ejectedUntil atomic.Int64
	failures     atomic.Int64
}

// NewEndpoint returns a standalone endpoint with default settings and the
// real clock. The Balancer makes its own; this is for fakes of Picker in
// other packages' tests.
func NewEndpoint(address string) *Endpoint {
	d := Config{}.withDefaults()
	return newEndpoint(address, newParams(d), int64(defaultEstimate), 0, d.Now().UnixNano())
}

func newParams(c Config) *params {
	return &params{now: c.Now, decay: float64(c.DecayTime), ejectBase: c.EjectBase, ejectMax: c.EjectMax}
}

func newEndpoint(address string, p *params, estimate int64, recent float64, now int64) *Endpoint {
	e := &Endpoint{address: address, p: p}
	e.latency.Store(estimate)
	e.latencyAt.Store(now)
	e.recent.Store(math.Float64bits(recent))
	e.recentAt.Store(now)
	return e
}

// Address is the dial address, host:port.
func (e *Endpoint) Address() string { return e.address }

func kindIndex(k Kind) int {
	if k == Long {
		return 1
	}
	return 0
}

func (e *Endpoint) ejected(now int64) bool { return e.ejectedUntil.Load() > now }

// decayWeight is how much of a value stamped at then is left at now.
func (e *Endpoint) decayWeight(then, now int64) float64 {
	if now <= then {
		return 1
	}
	return math.Exp(-float64(now-then) / e.p.decay)
}

// claim moves stamp forward to now and returns the decay weight of the
// interval it covered, so that concurrent updaters apply each stretch of
// decay exactly once.
func (e *Endpoint) claim(stamp *atomic.Int64, now int64) float64 {
	for {
		prev := stamp.Load()
		if now <= prev {
			return 1
		}
		if stamp.CompareAndSwap(prev, now) {
			return e.decayWeight(prev, now)
		}
	}
}

// served is the decayed count of recently finished short requests.
func (e *Endpoint) served(now int64) float64 {
	return math.Float64frombits(e.recent.Load()) * e.decayWeight(e.recentAt.Load(), now)
}

func (e *Endpoint) countServed(now int64) {
	w := e.claim(&e.recentAt, now)
	for {
		old := e.recent.Load()
		if e.recent.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)*w+1)) {
			return
		}
	}
}

// estimate is the latency estimate decayed to now. Decaying towards zero
// while no sample arrives (as tower's peak EWMA does at load time) is what
// brings back an endpoint that lost every comparison after a spike or a
// penalty: it grows cheaper until it is picked and measured again.
func (e *Endpoint) estimate(now int64) float64 {
	return float64(e.latency.Load()) * e.decayWeight(e.latencyAt.Load(), now)
}

// observe feeds one latency sample into the peak EWMA.
//
// A sample above the decayed estimate replaces it at once: a slowing
// apiserver is avoided on its first slow answer. A lower sample pulls the
// estimate down with weight 1-exp(-elapsed/decay), so a single fast answer
// does not undo a peak.
//
// penalty marks a fast failure (429 or 5xx). kube-apiserver's priority and
// fairness rejects with 429 in microseconds, so the raw latency would make
// an overloaded apiserver the cheapest one. The sample is raised to
// clamp(4×estimate, 10ms, 1s): four times puts it beyond the factor-of-two
// band in which policies call costs equal, the floor does the same for
// sub-millisecond backends, and the cap bounds the time (about
// DecayTime×ln(cap/peer latency)) a recovered endpoint stays starved.
// A slow failure keeps its own, larger latency.
func (e *Endpoint) observe(sample time.Duration, penalty bool, now int64) {
	w := e.claim(&e.latencyAt, now)
	for {
		old := e.latency.Load()
		cur := float64(old) * w
		s := float64(sample)
		if penalty {
			s = max(s, min(max(penaltyFactor*cur, float64(penaltyMin)), float64(penaltyMax)))
		}
		next := s
		if s < cur {
			next = cur*w + s*(1-w)
		}
		if e.latency.CompareAndSwap(old, int64(next)) {
			return
		}
	}
}

// eject skips the endpoint for EjectBase × 2^(failures-1), at most
// EjectMax. Concurrent failures keep the latest deadline.
func (e *Endpoint) eject(now int64) {
	n := e.failures.Add(1)
	d := e.p.ejectBase
	for i := int64(1); i < n && d < e.p.ejectMax; i++ {
		d *= 2
	}
	until := now + int64(min(d, e.p.ejectMax))
	for {
		old := e.ejectedUntil.Load()
		if until <= old || e.ejectedUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// finish records the end of a request picked with kind k. The caller
// guarantees it runs once per pick.
func (e *Endpoint) finish(k Kind, di DoneInfo) {
	e.inflight[kindIndex(k)].Add(-1)
	e.requests.Add(1)
	penalty := di.StatusCode == 429 || di.StatusCode >= 500
	if di.Err != nil || penalty {
		e.errors.Add(1)
	}
	gotResponse := di.StatusCode != 0 || (di.Err == nil && !di.Unavailable)
	switch {
	case di.Unavailable:
		e.eject(e.p.nowNanos())
	case gotResponse && e.failures.Load() != 0:
		// Only the failure count resets: an ejection in progress runs out,
		// since a response may come from a request that was picked before
		// the endpoint failed.
		e.failures.Store(0)
	}
	// A long request's duration is the client's choice, and long requests
	// are balanced by open count alone.
	if k == Long {
		return
	}
	now := e.p.nowNanos()
	e.countServed(now)
	if di.Latency > 0 {
		e.observe(di.Latency, penalty, now)
	}
}

// EndpointStatus is a point-in-time view of an Endpoint, served as JSON by
// the admin /debug/endpoints handler.
type EndpointStatus struct {
	Address                string  `json:"address"`
	State                  string  `json:"state"`
	InflightShort          int64   `json:"inflight_short"`
	InflightLong           int64   `json:"inflight_long"`
	LatencyEstimateSeconds float64 `json:"latency_estimate_seconds"`
	RequestsTotal          uint64  `json:"requests_total"`
	ErrorsTotal            uint64  `json:"errors_total"`
	// EjectedUntil is RFC 3339 (UTC, with fractional seconds), empty when
	// the endpoint is not ejected.
	EjectedUntil        string `json:"ejected_until"`
	ConsecutiveFailures int64  `json:"consecutive_failures"`
}

// Status returns a snapshot of the endpoint. The fields are read one by
// one, so they may straddle a concurrent request.
func (e *Endpoint) Status() EndpointStatus {
	return e.status(e.p.nowNanos())
}

func (e *Endpoint) status(now int64) EndpointStatus {
	s := EndpointStatus{
		Address:                e.address,
		State:                  StateReady,
		InflightShort:          e.inflight[0].Load(),
		InflightLong:           e.inflight[1].Load(),
		LatencyEstimateSeconds: e.estimate(now) / float64(time.Second),
		RequestsTotal:          e.requests.Load(),
		ErrorsTotal:            e.errors.Load(),
		ConsecutiveFailures:    e.failures.Load(),
	}
	if until := e.ejectedUntil.Load(); until > now {
		s.State = StateEjected
		s.EjectedUntil = time.Unix(0, until).UTC().Format(time.RFC3339Nano)
	}
	return s
}
