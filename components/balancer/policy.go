package balancer

import (
	"sync/atomic"
)

// policy chooses one endpoint of a non-empty candidate set. pick runs
// concurrently on every request goroutine: it must not block and may write
// nothing but atomics of its own.
type policy interface {
	pick(c candidates, info PickInfo) *Endpoint
}

// candidates is the part of an immutable endpoint slice a pick may choose
// from. It is a value so that passing it through the policy interface does
// not allocate.
type candidates struct {
	eps         []*Endpoint
	now         int64
	samples     int64 // the traffic clock, see Endpoint.estimate
	avoid       string
	skipEjected bool // skip endpoints that are not usable
	skipAvoid   bool
	// skipOverloaded skips endpoints penalised for overload (Unloaded).
	skipOverloaded bool
	// honourEjected is false when more endpoints are passively ejected
	// than the cap allows: then ejection is ignored.
	honourEjected bool
	// zoned keeps only the endpoints of zone slot zone (zone placement).
	zoned bool
	zone  int32
	// skipUnserved keeps only the endpoints that serve api by apis
	// (version skew, filterServed).
	skipUnserved bool
	apis         APIs
	api          API
	n            int // how many of eps pass the filters; at least 1 unless Unloaded or Served
}

// newCandidates filters eps, relaxing the filters in this order until some
// endpoint passes, among the endpoints that serve api when filterServed
// keeps some (apis nil: no filter):
//
//  1. usable and not avoided;
//  2. usable (the avoided endpoint is healthy: retry it rather than send
//     the request to one known to be down);
//  3. not avoided, usable or not (panic mode);
//  4. all.
//
// Usable means neither down (failing its readiness probe, draining, or
// shutting down: the apiserver's own word) nor passively ejected. Passive
// ejections are honoured only while at most maxEjected of the endpoints
// (rounded up) are ejected: more at once is more likely a fault on
// fanout's side, and ignoring them spreads the load rather than piling it
// on the few left. Down endpoints give way only in panic mode, when no
// endpoint is usable: a probe that fails everywhere more likely says
// something about fanout's own network or credentials than about every
// apiserver. eps must not be empty.
func newCandidates(eps []*Endpoint, now int64, avoid string, maxEjected float64, apis APIs, api API, routed *atomic.Uint64) candidates {
	ejected := 0
	for _, e := range eps {
		if e.ejected(now) {
			ejected++
		}
	}
	c := candidates{eps: eps, now: now, avoid: avoid, honourEjected: ejected <= ejectionCap(maxEjected, len(eps))}
	c.filterServed(apis, api, routed)
	unusable, avoided, avoidedUp, n := 0, 0, 0, 0
	for _, e := range eps {
		if c.skipUnserved && !c.apis.Serves(e.address, c.api) {
			continue
		}
		n++
		bad := !c.up(e)
		if bad {
			unusable++
		}
		if avoid != "" && e.address == avoid {
			avoided = 1
			if !bad {
				avoidedUp = 1
			}
		}
	}
	switch {
	case n-unusable-avoidedUp > 0:
		c.skipEjected, c.skipAvoid, c.n = true, true, n-unusable-avoidedUp
	case n-unusable > 0:
		c.skipEjected, c.n = true, n-unusable
	case n-avoided > 0:
		c.skipAvoid, c.n = true, n-avoided
	default:
		c.n = n
	}
	return c
}

// unloadedCandidates keeps the usable endpoints other than avoid that are
// not penalised for overload, with no relaxation: n may be 0.
func unloadedCandidates(eps []*Endpoint, now int64, avoid string) candidates {
	c := candidates{eps: eps, now: now, avoid: avoid, skipEjected: true, skipAvoid: true, skipOverloaded: true, honourEjected: true}
	for _, e := range eps {
		if c.usable(e) {
			c.n++
		}
	}
	return c
}

// up reports whether e is usable, honouring passive ejection only within
// the cap.
func (c *candidates) up(e *Endpoint) bool {
	return !e.down(c.now) && !(c.honourEjected && e.ejected(c.now))
}

func (c *candidates) usable(e *Endpoint) bool {
	if c.zoned && e.zone.Load() != c.zone {
		return false
	}
	if c.skipUnserved && !c.apis.Serves(e.address, c.api) {
		return false
	}
	if c.skipAvoid && e.address == c.avoid {
		return false
	}
	if c.skipOverloaded && e.overloaded(c.now) {
		return false
	}
	return !c.skipEjected || c.up(e)
}

// at returns the i-th usable endpoint. An endpoint ejected by a concurrent
// Done since newCandidates can shift the count; then the last usable one
// (or any endpoint) is returned rather than nil.
func (c *candidates) at(i int) *Endpoint {
	var last *Endpoint
	for _, e := range c.eps {
		if !c.usable(e) {
			continue
		}
		if i == 0 {
			return e
		}
		i--
		last = e
	}
	if last == nil {
		last = c.eps[0]
	}
	return last
}

// Two costs within a factor of tieFactor of each other are a tie. A
// peak-EWMA estimate holds an endpoint's recent worst latency, so equal
// apiservers routinely differ by up to twice: one of them just served a
// slow request. Ranking them strictly would starve that endpoint and leave
// a sequential client's shares to chance. A tie goes to fewer requests in
// flight, then to fewer requests served recently, then to the first of the
// two random candidates.
//
// The band is relative only: costs are latency scores (1 = usual for the
// class), so "a millisecond apart" has no meaning any more, and sub-
// millisecond noise is absorbed by the bound on how far one sample lifts a
// score (see Endpoint.observe).
const tieFactor = 2

func tie(a, b float64) bool {
	return max(a, b) <= tieFactor*min(a, b)
}

// leastRequest is power of two choices over a cost.
//
// Short requests cost latency score × (in flight + 1), the peak-EWMA load
// of Linkerd and tower with the latency measured against the usual latency
// of the request's class: it prefers fast apiservers and backs off from
// busy ones before their latency shows it. In-flight requests of every
// class count alike.
//
// Long requests (watches, exec, logs -f) hold a stream for minutes and tell
// nothing about latency, so they are spread by open count alone. They use a
// full scan rather than two choices: there are only a handful of apiservers,
// and a wrong pick would last as long as the watch.
type leastRequest struct {
	rand func(n int) int
}

func (p leastRequest) pick(c candidates, info PickInfo) *Endpoint {
	if info.Kind == Long {
		return p.fewestLong(c)
	}
	if c.n == 1 {
		return c.at(0)
	}
	i := p.rand(c.n)
	j := p.rand(c.n - 1)
	if j >= i {
		j++
	}
	a, b := c.at(i), c.at(j)
	ia, ib := a.inflight[0].Load(), b.inflight[0].Load()
	ca := max(a.estimate(c.now, c.samples), minScore) * float64(ia+1) * c.factor(a)
	cb := max(b.estimate(c.now, c.samples), minScore) * float64(ib+1) * c.factor(b)
	switch {
	case !tie(ca, cb):
		if cb < ca {
			return b
		}
	case ib != ia:
		if ib < ia {
			return b
		}
	case b.served(c.now) < a.served(c.now):
		return b
	}
	return a
}

// fewestLong returns the usable endpoint with the fewest open long
// requests, starting the scan at a random endpoint so ties spread.
func (p leastRequest) fewestLong(c candidates) *Endpoint {
	var best *Endpoint
	var bestOpen float64
	start := p.rand(len(c.eps))
	for k := range c.eps {
		e := c.eps[(start+k)%len(c.eps)]
		if !c.usable(e) {
			continue
		}
		if open := float64(e.inflight[1].Load()+1) * c.factor(e); best == nil || open < bestOpen {
			best, bestOpen = e, open
		}
	}
	if best == nil {
		return c.at(0)
	}
	return best
}

// factor multiplies an endpoint's cost: by penaltyFactor while it is
// penalised for an overload rejection (its latency score took a penalty
// too, but that fades with traffic within a few rounds, and priority and
// fairness asks for seconds), and by 1/weight while it slow-starts.
func (c *candidates) factor(e *Endpoint) float64 {
	f := 1 / e.weight(c.now)
	if e.overloaded(c.now) {
		f *= penaltyFactor
	}
	return f
}

// roundRobin takes usable endpoints in turn, for short and long requests
// alike. The counter lives in the policy, not the picker, so the rotation
// continues across updates.
type roundRobin struct {
	next atomic.Uint64
}

func (p *roundRobin) pick(c candidates, _ PickInfo) *Endpoint {
	i := p.next.Add(1) - 1
	return c.at(int(i % uint64(c.n)))
}

var (
	_ policy = leastRequest{}
	_ policy = (*roundRobin)(nil)
)
