package balancer

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fanout-dev/fanout/resolver"
)

// Balancer is what the proxy picks with (its Picker). Update is called from one
// goroutine (the resolver's); Pick, Endpoints, Ready, SetReady and the collector may
// be called concurrently with it and with each other. None of them takes a
// lock: Update publishes an immutable snapshot through an atomic pointer
// and all per-request state lives in the endpoints' atomics.
type Balancer struct {
	p          *params
	policy     policy
	maxEjected float64
	zones      zonePolicy
	rand       func(n int) int
	current    atomic.Pointer[snapshot]
	apis       atomic.Pointer[apisBox] // see SetAPIs; nil: nothing known
}

// snapshot is one published endpoint set, sorted by address. Neither the
// slice nor the struct is modified after it is stored.
type snapshot struct {
	eps   []*Endpoint
	zones zoneLayout
}

// New returns a Balancer with no endpoints for cfg, which passed Validate
// (the engine's Config.Validate calls it): Pick returns ErrNoEndpoints
// until the first Update. It returns an error only for a policy it does
// not know, so that a Config that skipped Validate cannot pick at random.
func New(cfg Config) (*Balancer, error) {
	cfg = cfg.withDefaults()
	b := &Balancer{p: newParams(cfg), maxEjected: cfg.MaxEjectedFraction, zones: newZonePolicy(cfg), rand: cfg.Rand}
	p, err := cfg.policy()
	if err != nil {
		return nil, err
	}
	b.policy = p
	b.current.Store(&snapshot{})
	return b, nil
}

// Update replaces the endpoint set with a full snapshot. Addresses that stay
// keep their *Endpoint, with counters and latency estimate; new ones start
// from the median latency estimate and recent request count of the current
// endpoints so that they neither draw nor shun traffic. Requests in flight
// on a removed endpoint finish normally. An endpoint marked Draining stays
// known, with its counters and its requests in flight, but picks skip it
// as they skip ejected ones (and, like those, use it in panic mode). Update must not be called concurrently with itself; it does not
// retain eps.
func (b *Balancer) Update(eps []resolver.Endpoint) {
	now, samples := b.p.clock()
	old := b.current.Load().eps
	kept := make(map[string]*Endpoint, len(old))
	for _, e := range old {
		kept[e.address] = e
	}
	seed, served := 1.0, 0.0
	if len(old) > 0 {
		ests := make([]float64, len(old))
		counts := make([]float64, len(old))
		for i, e := range old {
			ests[i], counts[i] = e.estimate(now, samples), e.served(now)
		}
		slices.Sort(ests)
		slices.Sort(counts)
		seed, served = ests[len(ests)/2], counts[len(counts)/2]
	}
	next := make([]*Endpoint, 0, len(eps))
	from := make([]resolver.Endpoint, 0, len(eps)) // aligned with next
	seen := make(map[string]bool, len(eps))
	for _, re := range eps {
		if seen[re.Address] {
			continue
		}
		seen[re.Address] = true
		from = append(from, re)
		e := kept[re.Address]
		if e == nil {
			e = newEndpoint(re.Address, b.p, seed, served, now)
			if len(old) == 0 {
				// The first set: nobody to ramp up against.
				e.upSince.Store(0)
			}
		}
		// Set before publishing, so no pick sees a fresh draining
		// endpoint as usable.
		e.markUp(e.draining.Swap(re.Draining) && !re.Draining, now)
		next = append(next, e)
	}
	zones := b.zones.layout(from, next)
	for _, e := range old {
		if !seen[e.address] {
			e.retire()
		}
	}
	slices.SortFunc(next, func(x, y *Endpoint) int { return strings.Compare(x.address, y.address) })
	// A round of the traffic clock is one request per endpoint.
	b.p.roundStep.Store(roundScale / int64(max(len(next), 1)))
	b.current.Store(&snapshot{eps: next, zones: zones})
}

// Pick chooses an endpoint for one request and counts it in flight until
// Done. It fails only with ErrNoEndpoints; while endpoints exist it picks
// one even if all are ejected.
func (b *Balancer) Pick(info PickInfo) (Pick, error) {
	snap := b.current.Load()
	eps := snap.eps
	if len(eps) == 0 {
		return Pick{}, ErrNoEndpoints
	}
	if info.Only != "" {
		i, ok := slices.BinarySearchFunc(eps, info.Only, func(e *Endpoint, addr string) int { return strings.Compare(e.address, addr) })
		if !ok {
			return Pick{}, ErrNoAlternative
		}
		e := eps[i]
		e.inflight[kindIndex(info.Kind)].Add(1)
		return newPick(e, info.Kind, info.Class, nil), nil
	}
	now, samples := b.p.clock()
	var c candidates
	switch {
	case info.Served:
		apis := b.servedFilter(info.API, true)
		if apis == nil {
			return Pick{}, ErrNoAlternative
		}
		c = servedCandidates(eps, now, info.Avoid, b.maxEjected, apis, info.API)
		if c.n == 0 {
			return Pick{}, ErrNoAlternative
		}
	case info.Unloaded:
		c = unloadedCandidates(eps, now, info.Avoid)
		if c.n == 0 {
			return Pick{}, ErrNoAlternative
		}
	default:
		c = newCandidates(eps, now, info.Avoid, b.maxEjected, b.servedFilter(info.API, false), info.API, &b.p.skewRouted)
	}
	c.samples = samples
	var e *Endpoint
	if info.Oldest {
		// The 410 retry wants the longest watch cache wherever it is.
		e = oldest(c)
	} else {
		if snap.zones.on {
			b.zones.placeZone(&c, &snap.zones, info.Kind, b.rand)
		}
		e = b.policy.pick(c, info)
	}
	e.inflight[kindIndex(info.Kind)].Add(1)
	return newPick(e, info.Kind, info.Class, nil), nil
}

// Endpoints returns the status of every current endpoint, sorted by
// address.
func (b *Balancer) Endpoints() []EndpointStatus {
	eps := b.current.Load().eps
	now, samples := b.p.clock()
	out := make([]EndpointStatus, len(eps))
	for i, e := range eps {
		out[i] = e.status(now, samples)
		out[i].Version = b.version(e.address)
	}
	return out
}

// Ready reports whether at least one endpoint is known, not ejected and
// not failing its readiness probe. The admin /readyz uses it: with none,
// every request would go to an apiserver that just failed or is not ready.
func (b *Balancer) Ready() bool {
	now := time.Now().UnixNano()
	for _, e := range b.current.Load().eps {
		if e.usable(now) {
			return true
		}
	}
	return false
}

// SetReady records the result of an active readiness probe of the endpoint
// at address. A not-ready endpoint is skipped by picks like an ejected one
// (and like one, used again in panic mode) until SetReady(address, true).
// The flag lives in the *Endpoint, so it survives updates that keep the
// address; an address added anew starts ready. Unknown addresses are
// ignored: the prober may report just after an update removed one.
//
// SetReady may be called concurrently with everything, Update included; a
// report that races with an Update re-adding the address may land on the
// old *Endpoint, and the prober's next report fixes that.
func (b *Balancer) SetReady(address string, ready bool) {
	for _, e := range b.current.Load().eps {
		if e.address == address {
			e.markUp(e.notReady.Swap(!ready) && ready, time.Now().UnixNano())
			return
		}
	}
}

// Baseline returns the usual latency of a successful short request of
// class c across endpoints, the unit of EndpointStatus.LatencyScore; ok is
// false until a request of the class has been measured.
func (b *Balancer) Baseline(c Class) (d time.Duration, ok bool) {
	bits := b.p.baseline[c.index()].Load()
	if bits == 0 {
		return 0, false
	}
	return time.Duration(math.Float64frombits(bits)), true
}
