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
	// StateNotReady is an endpoint whose last readiness probe failed (see
	// SetReady). It wins over StateEjected: it lasts until a probe passes,
	// whatever the ejection's deadline.
	StateNotReady = "not_ready"
	// StateDraining is an endpoint the resolver marked as draining (an
	// EndpointSlice endpoint that is terminating, or serving but not
	// ready): it gets no new requests while those in flight finish. It
	// wins over the other states, as it lasts until the resolver says
	// otherwise or removes the endpoint.
	StateDraining = "draining"
)

// The latency estimate. See observe for how these shape it.
const (
	// upFactor bounds how far one sample lifts the estimate: to at most
	// upFactor × max(estimate, 1). Each further consecutive sample that
	// hits the bound doubles the allowance, up to 2^maxRise.
	upFactor = 2
	maxRise  = 6
	// downWeight is the weight of a sample below the estimate.
	downWeight = 0.25
	// decayRounds is the traffic time constant of the estimate: it fades
	// to 1/e of its distance from 1 after this many rounds, a round being
	// as many finished short requests as there are endpoints. The fading
	// by traffic and by DecayTime compound.
	decayRounds = 10
	// roundScale is the traffic clock's resolution: a round is roundScale
	// ticks, so that a request of an n-endpoint set adds roundScale/n.
	roundScale = 1 << 16
	// baselineWeight and baselineStep shape the class baseline, see ratio.
	baselineWeight = 1.0 / 16
	baselineStep   = 4
	// minScore floors the estimate in the cost, so that in-flight counts
	// still weigh between endpoints whose estimates fell far below 1.
	minScore = 1.0 / 16
	// penaltyFactor and penaltyMax shape the score given for a fast
	// failure, see observe.
	penaltyFactor = 4
	penaltyMax    = 1024
)

// params are the per-Balancer settings its endpoints need in Done, and the
// state they share: the class baselines and the traffic clock. It is only
// used through a pointer.
type params struct {
	decay     float64 // DecayTime in nanoseconds
	ejectBase time.Duration
	ejectMax  time.Duration
	// The outlier, shutdown, overload and slow-start settings; see Config.
	consecutive     int64
	drainHold       int64 // nanoseconds
	overloadPenalty int64 // nanoseconds
	slowStart       float64
	slowMin         float64

	// baseline is, per Class (see Class.index), the usual latency of a
	// successful short request of that class on any endpoint: nanoseconds
	// as float64 bits, 0 until the first sample.
	baseline [numClasses]atomic.Uint64
	// samples is the traffic clock in ticks: each finished short request
	// adds roundStep, roundScale divided by the number of endpoints.
	samples   atomic.Int64
	roundStep atomic.Int64
	// retired counts, by locality, the finished requests of endpoints
	// no longer counted under it (removed, or moved to another zone).
	retired [3]atomic.Uint64
	// reported is the highest local and remote count collected yet.
	reported [2]atomic.Uint64
	// skewRouted counts the picks that left out an endpoint because it
	// does not serve the request's API (filterServed).
	skewRouted atomic.Uint64
}

// clock returns both clocks the estimate decays with: wall time in unix
// nanoseconds and the traffic clock.
func (p *params) clock() (now, samples int64) { return time.Now().UnixNano(), p.samples.Load() }

// ratio returns sample relative to the baseline of class c. With learn it
// also moves the baseline towards sample; the first sample of a class sets
// it, and counts as exactly usual.
//
// The baseline is a geometric EWMA over samples of every endpoint (weight
// baselineWeight), and a sample moves it at most as if it were baselineStep
// times off. A 50× spike thus lifts it by 4^(1/16), about 9%, instead of
// making every other endpoint's next answer look fast; a class whose real
// latency shifts follows within a few dozen samples. It counts samples, not
// seconds, so that a class seen once a minute still has a baseline made of
// its own last samples.
func (p *params) ratio(c Class, sample time.Duration, learn bool) float64 {
	slot := &p.baseline[c.index()]
	s := float64(sample)
	for {
		old := slot.Load()
		if old == 0 {
			if !learn || slot.CompareAndSwap(0, math.Float64bits(s)) {
				return 1
			}
			continue
		}
		base := math.Float64frombits(old)
		r := s / base
		if !learn {
			return r
		}
		next := base * math.Pow(min(max(r, 1.0/baselineStep), baselineStep), baselineWeight)
		if next == base || slot.CompareAndSwap(old, math.Float64bits(next)) {
			return r
		}
	}
}

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
	// ejectionsTotal counts ejections ever, for
	// fanout_endpoint_ejections_total.
	ejectionsTotal atomic.Uint64

	// score is the latency estimate relative to the class baselines
	// (float64 bits): 1 is as fast as usual for the requests it served, 2
	// twice as slow. It is as of scoreAt (unix nanoseconds) and
	// scoreSamples (traffic clock); readers decay it to their own clocks
	// without writing, see estimate. The words are not updated together; a
	// reader that sees a new stamp with an old value only misses a sliver
	// of decay. rising counts consecutive samples cut short by the
	// upFactor bound.
	score        atomic.Uint64
	scoreAt      atomic.Int64
	scoreSamples atomic.Int64
	rising       atomic.Int32

	// recent counts short requests finished, decayed with DecayTime
	// (float64 bits, as of recentAt). It breaks ties between equally
	// cheap endpoints; unlike requests it forgets, so an endpoint back
	// from a long ejection or a fresh one is favoured for seconds, not
	// until it has caught up with its peers' lifetime totals.
	recent   atomic.Uint64
	recentAt atomic.Int64

	// ejectedUntil is in unix nanoseconds; the endpoint is skipped while
	// it is in the future. failures counts consecutive Unavailable results
	// and sets the length of the next ejection.
	ejectedUntil atomic.Int64
	failures     atomic.Int64

	// notReady is set while the active readiness probe says the apiserver
	// must not get traffic (see Balancer.SetReady). The zero value is
	// ready, so that an endpoint nobody probes, or one not probed yet,
	// takes traffic at once.
	notReady atomic.Bool

	// draining is set from the resolver's snapshot (see Balancer.Update).
	// It is a flag of its own, not notReady, so that a passing probe does
	// not undo what discovery said, nor the next snapshot a failed probe.
	draining atomic.Bool

	// streak counts consecutive DoneInfo.Failed results since the last
	// answer or ejection; Config.ConsecutiveFailures of them eject.
	streak atomic.Int64
	// ejections counts ejections since the endpoint last answered; each
	// doubles the next one's length.
	ejections atomic.Int64
	// shutdownUntil and overloadedUntil (unix nanoseconds) are set by
	// DoneInfo.ShuttingDown and DoneInfo.Overloaded; see Config.DrainHold
	// and Config.OverloadPenalty.
	shutdownUntil   atomic.Int64
	overloadedUntil atomic.Int64
	// upSince is when the endpoint last became usable through an event
	// the balancer sees (added, probe passing again, draining lifted);
	// ends of ejections and shutdown holds are taken from their deadlines.
	// Slow start ramps from the latest of them.
	upSince atomic.Int64

	// zone is the endpoint's zone slot in the current snapshot's layout
	// (see zoneLayout), locality whether that is fanout's own zone, and
	// countBase the requests already counted under an earlier locality;
	// all set by Update.
	zone      atomic.Int32
	locality  atomic.Uint32
	countBase atomic.Uint64
}

// NewEndpoint returns a standalone endpoint with default settings. The
// Balancer makes its own; this is for fakes of the proxy's Picker in other
// packages' tests.
func NewEndpoint(address string) *Endpoint {
	return newEndpoint(address, newParams(Config{}.withDefaults()), 1, 0, time.Now().UnixNano())
}

func newParams(c Config) *params {
	p := &params{decay: float64(c.DecayTime), ejectBase: c.EjectBase, ejectMax: c.EjectMax,
		consecutive: int64(c.ConsecutiveFailures), drainHold: int64(c.DrainHold),
		overloadPenalty: int64(c.OverloadPenalty), slowStart: float64(c.SlowStart), slowMin: c.SlowStartMinWeight}
	p.roundStep.Store(roundScale) // one endpoint until Update says otherwise
	return p
}

func newEndpoint(address string, p *params, score, recent float64, now int64) *Endpoint {
	e := &Endpoint{address: address, p: p}
	e.score.Store(math.Float64bits(score))
	e.scoreAt.Store(now)
	e.scoreSamples.Store(p.samples.Load())
	e.recent.Store(math.Float64bits(recent))
	e.recentAt.Store(now)
	e.upSince.Store(now)
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

// usable reports whether picks should consider the endpoint: neither
// ejected after a failure, failing its readiness probe nor draining.
func (e *Endpoint) usable(now int64) bool {
	return !e.down(now) && !e.ejected(now)
}

// claim moves stamp forward to v and returns how far it moved, so that
// concurrent updaters apply each stretch of decay exactly once.
func claim(stamp *atomic.Int64, v int64) int64 {
	for {
		prev := stamp.Load()
		if v <= prev {
			return 0
		}
		if stamp.CompareAndSwap(prev, v) {
			return v - prev
		}
	}
}

// timeDecay is how much of a value decaying with DecayTime is left after
// d nanoseconds.
func (e *Endpoint) timeDecay(d int64) float64 {
	if d <= 0 {
		return 1
	}
	return math.Exp(-float64(d) / e.p.decay)
}

// scoreDecay is how much of the estimate's distance from 1 is left after d
// nanoseconds and n ticks of the traffic clock.
func (e *Endpoint) scoreDecay(d, n int64) float64 {
	return math.Exp(-float64(max(d, 0))/e.p.decay - float64(max(n, 0))/(roundScale*decayRounds))
}

// served is the decayed count of recently finished short requests.
func (e *Endpoint) served(now int64) float64 {
	return math.Float64frombits(e.recent.Load()) * e.timeDecay(now-e.recentAt.Load())
}

func (e *Endpoint) countServed(now int64) {
	w := e.timeDecay(claim(&e.recentAt, now))
	for {
		old := e.recent.Load()
		if e.recent.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)*w+1)) {
			return
		}
	}
}

// estimate is the latency score decayed to the given clocks.
//
// It fades towards 1, the class baseline, not towards zero: what an old
// measurement leaves behind is "as fast as usual", which is the honest
// prior. Fading to zero would instead make every endpoint that has not
// been measured for a while look faster than all the others and draw all
// traffic until it is measured again.
//
// It fades with wall time (DecayTime) and with traffic: one round of
// requests, one per endpoint, removes 1/decayRounds of its distance from
// 1. The traffic clock is what brings an endpoint that loses every
// comparison back within a bounded number of requests however fast they
// come. With wall time alone a sequential client sending a thousand
// requests a second would pass over an endpoint for tens of thousands of
// requests after one slow answer.
func (e *Endpoint) estimate(now, samples int64) float64 {
	w := e.scoreDecay(now-e.scoreAt.Load(), samples-e.scoreSamples.Load())
	return 1 + (math.Float64frombits(e.score.Load())-1)*w
}

// observe feeds one latency sample of class c into the estimate. The
// sample is first divided by the class baseline (see ratio), so that a
// LIST is compared with LISTs and a GET with GETs; the estimate and the
// cost are in units of "usual".
//
// A ratio above the estimate raises it at once, as peak EWMA does, but by
// at most upFactor × max(estimate, 1). One outlier (GC pause, CPU
// contention, a LIST of an unusually large collection) therefore lifts the
// estimate to 2 at most, inside the factor-of-two band in which policies
// call costs equal, and costs the endpoint nothing. Each further
// consecutive sample that hits the bound doubles the allowance (×4, ×8, …),
// so sustained slowness reaches its real level within log2(slowness)
// samples, and an endpoint that is really 100× slower is probed ever more
// rarely rather than every few rounds. A ratio below the estimate pulls it
// down with weight downWeight.
//
// penalty marks a fast failure (429 or 5xx). kube-apiserver's priority and
// fairness rejects with 429 in microseconds, so the raw latency would make
// an overloaded apiserver the cheapest one. The score is raised to
// penaltyFactor × max(estimate, 1), clear of the factor-of-two band. It
// compounds: the endpoint is tried again only once its score has faded to
// where it wins a comparison, and each failure then lifts it 4× above that
// level. Under a sequential client that level is about 2; under many
// concurrent clients it is the healthy endpoints' in-flight count, which
// the failing one, answering at once, never builds up. penaltyMax is
// therefore high, 1024: it only bounds the time a recovered endpoint
// stays starved, about decayRounds × ln(penaltyMax) ≈ 70 rounds, or
// DecayTime × ln(penaltyMax) when traffic is sparse. A slow failure keeps
// its own, larger ratio, within the same cap. Penalised samples do not
// feed the baseline: an instant 429 says nothing about how long a GET
// takes.
func (e *Endpoint) observe(c Class, sample time.Duration, penalty bool, now, samples int64) {
	r := e.p.ratio(c, sample, !penalty)
	w := e.scoreDecay(claim(&e.scoreAt, now), claim(&e.scoreSamples, samples))
	rising := min(e.rising.Load(), maxRise)
	for {
		old := e.score.Load()
		cur := 1 + (math.Float64frombits(old)-1)*w
		next, capped := cur, false
		switch {
		case penalty:
			next = max(cur, min(max(r, penaltyFactor*max(cur, 1)), penaltyMax))
		case r > cur:
			limit := max(cur, 1) * float64(int(upFactor)<<rising)
			next, capped = min(r, limit), r > limit
		default:
			next = cur + (r-cur)*downWeight
		}
		if !e.score.CompareAndSwap(old, math.Float64bits(next)) {
			continue
		}
		switch {
		case penalty:
		case capped:
			e.rising.Add(1)
		case rising != 0:
			e.rising.Store(0)
		}
		return
	}
}

// eject skips the endpoint for EjectBase × 2^(ejections-1), at most
// EjectMax, where ejections counts the ejections since the endpoint last
// answered. Concurrent failures keep the latest deadline.
func (e *Endpoint) eject(now int64) {
	e.failures.Add(1)
	e.ejectionsTotal.Add(1)
	n := e.ejections.Add(1)
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

// finish records the end of a request picked with kind k and class c. The
// caller guarantees it runs once per pick.
func (e *Endpoint) finish(k Kind, c Class, di DoneInfo) {
	e.inflight[kindIndex(k)].Add(-1)
	e.requests.Add(1)
	penalty := !di.Relayed && !di.DeadlineExpired && (di.StatusCode == 429 || di.StatusCode >= 500)
	if (di.Err != nil && (!di.Relayed || di.Unavailable)) || penalty {
		e.errors.Add(1)
	}
	gotResponse := di.StatusCode != 0 || (di.Err == nil && !di.Unavailable)
	switch {
	case di.Unavailable:
		e.streak.Store(0)
		e.eject(time.Now().UnixNano())
	case di.Relayed:
		// Another server's answer, or an error that may be its: it
		// neither fails nor clears the endpoint (DoneInfo.Relayed).
	case di.ShuttingDown:
		// Neither an answer nor a failure: the apiserver is healthy and
		// leaving on purpose.
		e.drainFor(time.Now().UnixNano())
	case di.Failed:
		e.failed(time.Now().UnixNano())
	case gotResponse && e.failures.Load() != 0:
		// Only the failure count resets: an ejection in progress runs out,
		// since a response may come from a request that was picked before
		// the endpoint failed.
		e.failures.Store(0)
		e.streak.Store(0)
		e.ejections.Store(0)
	case gotResponse && e.streak.Load() != 0:
		e.streak.Store(0)
	}
	if di.Overloaded && !di.Relayed {
		e.overloadFor(time.Now().UnixNano())
	}
	// A long request's duration is the client's choice, and long requests
	// are balanced by open count alone.
	if k == Long {
		return
	}
	now := time.Now().UnixNano()
	samples := e.p.samples.Add(e.p.roundStep.Load())
	e.countServed(now)
	if di.Latency > 0 && !di.Relayed && !di.DeadlineExpired {
		e.observe(c, di.Latency, penalty, now, samples)
	}
}

// EndpointStatus is a point-in-time view of an Endpoint, served as JSON by
// the admin /debug/endpoints handler.
type EndpointStatus struct {
	Address       string `json:"address"`
	State         string `json:"state"`
	InflightShort int64  `json:"inflight_short"`
	InflightLong  int64  `json:"inflight_long"`
	// LatencyScore is the latency estimate relative to the usual latency
	// of the same class of request on any endpoint: 1 is usual, 2 twice
	// as slow. It fades back to 1 while the endpoint is not measured.
	LatencyScore  float64 `json:"latency_score"`
	RequestsTotal uint64  `json:"requests_total"`
	ErrorsTotal   uint64  `json:"errors_total"`
	// EjectionsTotal counts the endpoint's passive ejections.
	EjectionsTotal uint64 `json:"ejections_total"`
	// EjectedUntil is RFC 3339 (UTC, with fractional seconds), empty when
	// the endpoint is not ejected.
	EjectedUntil        string `json:"ejected_until"`
	ConsecutiveFailures int64  `json:"consecutive_failures"`
	// ProbeReady is false while the last readiness probe failed; true for
	// an endpoint not probed (yet).
	ProbeReady bool `json:"probe_ready"`
	// Draining is true while the resolver reports the endpoint as
	// terminating or not ready: it takes no new requests.
	Draining bool `json:"draining"`
	// ShuttingDownUntil is RFC 3339, set while the endpoint gets no new
	// requests because its apiserver answered "shutting down".
	ShuttingDownUntil string `json:"shutting_down_until,omitempty"`
	// OverloadedUntil is RFC 3339, set while the endpoint is penalised
	// for an overload rejection (429 from priority and fairness).
	OverloadedUntil string `json:"overloaded_until,omitempty"`
	// SlowStartWeight is below 1 while the endpoint ramps up after it
	// became usable (see Config.SlowStart).
	SlowStartWeight float64 `json:"slow_start_weight"`
	// Version is the endpoint's kube-apiserver version from its /version
	// (SetAPIs), "" until known or with skew routing off.
	Version string `json:"version,omitempty"`
}

// Status returns a snapshot of the endpoint. The fields are read one by
// one, so they may straddle a concurrent request.
func (e *Endpoint) Status() EndpointStatus {
	return e.status(e.p.clock())
}

func (e *Endpoint) status(now, samples int64) EndpointStatus {
	s := EndpointStatus{
		Address:             e.address,
		State:               StateReady,
		InflightShort:       e.inflight[0].Load(),
		InflightLong:        e.inflight[1].Load(),
		LatencyScore:        e.estimate(now, samples),
		RequestsTotal:       e.requests.Load(),
		ErrorsTotal:         e.errors.Load(),
		EjectionsTotal:      e.ejectionsTotal.Load(),
		ConsecutiveFailures: e.failures.Load(),
		ProbeReady:          !e.notReady.Load(),
		Draining:            e.draining.Load(),
	}
	if until := e.ejectedUntil.Load(); until > now {
		s.State = StateEjected
		s.EjectedUntil = time.Unix(0, until).UTC().Format(time.RFC3339Nano)
	}
	if !s.ProbeReady {
		s.State = StateNotReady
	}
	if until := e.shutdownUntil.Load(); until > now {
		s.State = StateDraining
		s.ShuttingDownUntil = time.Unix(0, until).UTC().Format(time.RFC3339Nano)
	}
	if s.Draining {
		s.State = StateDraining
	}
	if until := e.overloadedUntil.Load(); until > now {
		s.OverloadedUntil = time.Unix(0, until).UTC().Format(time.RFC3339Nano)
	}
	s.SlowStartWeight = e.weight(now)
	return s
}
