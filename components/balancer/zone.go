package balancer

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/fanout-dev/fanout/resolver"
)

// Zone placement: which zone a pick chooses from, before the policy
// chooses an endpoint in it. See docs/resilience.md, "Zone placement".
//
// Two rules are borrowed. Kubernetes' trafficDistribution PreferSameZone
// sends everything to the client's own zone while it has endpoints
// (ZonePolicySameZoneFirst). Envoy's zone-aware routing keeps as much
// traffic local as the local zone's healthy capacity allows while every
// upstream host keeps about the same load: when the local zone's share of
// the healthy capacity falls below its share of the clients, only
// capacity/demand of the traffic stays, and the rest spills to the other
// zones in proportion to their residual capacity (ZonePolicySpillOver).
// fanout does not know where the other clients are; it takes them to be
// spread over the zones as the apiservers are (the zone's share of all
// known endpoints), which is how control planes and their clients are
// usually laid out.
//
// Neither prefers a zone holding fewer than Config.ZoneMinEndpoints
// usable endpoints: a client of a zone with one apiserver would otherwise
// be pinned to it, and lose what fanout is for.

// Zone policy names accepted by Config.ZonePolicy (and --zone-policy).
const (
	ZonePolicyOff           = "off"
	ZonePolicySameZoneFirst = "same-zone-first"
	ZonePolicySpillOver     = "spill-over"
)

// DefaultZoneMinEndpoints is the --zone-min-endpoints default.
const DefaultZoneMinEndpoints = 2

// maxZones bounds the zones placement tells apart, so that a pick keeps
// its per-zone sums in fixed arrays on the stack. Zones beyond the first
// maxZones-1 remote ones share the last slot: they are only told apart
// for the spill's distribution, and control planes span three zones.
const maxZones = 8

// Endpoint localities for fanout_zone_requests_total.
const (
	localityUnknown uint32 = iota
	localityLocal
	localityRemote
)

var localityNames = [3]string{"", "local", "remote"}

// zoneLayout is a snapshot's zones: slot 0 is the own zone, the others
// are the remote zones in address order of their first endpoint.
type zoneLayout struct {
	// on is true when placement applies: a zone policy is set, the own
	// zone is known and at least one endpoint is in it.
	on bool
	n  int
	// expected is each zone's share of all known endpoints, the share of
	// the clients taken to be in it.
	expected [maxZones]float64
}

// zonePolicy is the balancer's part of Config's zone fields.
type zonePolicy struct {
	zone   string
	policy string
	min    int32
}

func newZonePolicy(c Config) zonePolicy {
	p := zonePolicy{zone: c.Zone, policy: c.ZonePolicy, min: int32(max(c.ZoneMinEndpoints, 1))}
	if p.policy == "" {
		p.policy = ZonePolicyOff
	}
	return p
}

// validateZone checks the zone fields, naming their flags.
func (c Config) validateZone() error {
	switch c.ZonePolicy {
	case "", ZonePolicyOff:
	case ZonePolicySameZoneFirst, ZonePolicySpillOver:
		if c.ZoneMinEndpoints < 1 {
			return fmt.Errorf("--zone-min-endpoints must be at least 1, got %d", c.ZoneMinEndpoints)
		}
	default:
		return fmt.Errorf("--zone-policy must be %s, %s or %s, got %q", ZonePolicyOff, ZonePolicySameZoneFirst, ZonePolicySpillOver, c.ZonePolicy)
	}
	if err := resolver.ValidateZone(c.Zone); err != nil {
		return fmt.Errorf("--zone: %w", err)
	}
	return nil
}

// layout assigns each endpoint of a new snapshot its zone slot and
// locality, and returns the snapshot's zone layout. eps and next are
// aligned (next[i] is eps[i]'s *Endpoint).
func (p zonePolicy) layout(eps []resolver.Endpoint, next []*Endpoint) zoneLayout {
	l := zoneLayout{n: 1}
	slots := map[string]int32{}
	if p.zone != "" {
		slots[p.zone] = 0
	} // else slot 0 stays empty: no zone is local
	var counts [maxZones]int
	for i, re := range eps {
		e := next[i]
		slot, ok := slots[re.Zone]
		if !ok {
			slot = int32(min(l.n, maxZones-1))
			slots[re.Zone] = slot
			l.n = min(l.n+1, maxZones)
		}
		e.zone.Store(slot)
		counts[slot]++
		loc := localityUnknown
		if p.zone != "" {
			loc = localityRemote
			if slot == 0 {
				loc = localityLocal
			}
		}
		e.setLocality(loc)
	}
	l.on = p.policy != ZonePolicyOff && p.zone != "" && counts[0] > 0
	for i := range l.n {
		l.expected[i] = float64(counts[i]) / float64(max(len(eps), 1))
	}
	return l
}

// setLocality records the endpoint's locality for
// fanout_zone_requests_total. The requests it served so far stay counted
// under the locality it had: they move into retired, and base restarts
// its own count.
func (e *Endpoint) setLocality(loc uint32) {
	old := e.locality.Swap(loc)
	if old == loc {
		return
	}
	served := e.requests.Load()
	e.p.retired[old].Add(served - e.countBase.Swap(served))
}

// retire keeps the requests of an endpoint leaving the set counted under
// its locality.
func (e *Endpoint) retire() {
	served := e.requests.Load()
	e.p.retired[e.locality.Load()].Add(served - e.countBase.Swap(served))
}

// zoneRequests returns the requests finished on local and on remote
// endpoints, those of removed endpoints included. A scrape racing an
// Update may see a request in retired and on its endpoint both; the
// counts never go back, though: each is the highest yet reported, until
// the real count passes it.
func (b *Balancer) zoneRequests() (local, remote uint64) {
	var n [3]uint64
	n[localityLocal], n[localityRemote] = b.p.retired[localityLocal].Load(), b.p.retired[localityRemote].Load()
	for _, e := range b.current.Load().eps {
		base := e.countBase.Load() // first: it never passes requests
		n[e.locality.Load()] += e.requests.Load() - base
	}
	return raiseTo64(&b.p.reported[0], n[localityLocal]), raiseTo64(&b.p.reported[1], n[localityRemote])
}

// raiseTo64 moves v up to n and returns the result.
func raiseTo64(v *atomic.Uint64, n uint64) uint64 {
	for {
		old := v.Load()
		if n <= old {
			return old
		}
		if v.CompareAndSwap(old, n) {
			return n
		}
	}
}

// capacity is what the endpoint adds to its zone's healthy capacity: its
// slow-start weight, divided by penaltyFactor while it is penalised for
// an overload rejection. An apiserver turning requests away, or one
// ramping up, holds less than a full share.
func (e *Endpoint) capacity(now int64) float64 {
	w := e.weight(now)
	if e.overloaded(now) {
		w /= penaltyFactor
	}
	return w
}

// zoneSums are a candidate set's usable endpoints per zone slot. The
// zone is chosen over the usable endpoints, the one a retry avoids
// included (members, capacity): a request retried away from a local
// apiserver stays in the zone while the zone as a whole qualifies, rather
// than leaving it because its other local apiserver alone is below the
// minimum. count is the candidates the pick may then take.
type zoneSums struct {
	members  [maxZones]int32
	count    [maxZones]int32
	capacity [maxZones]float64
	open     [maxZones]int64 // long requests open
	total    float64         // capacity of every slot
}

func (s *zoneSums) add(c *candidates) {
	all := *c
	all.skipAvoid = false
	for _, e := range c.eps {
		if !all.usable(e) {
			continue
		}
		z := e.zone.Load()
		w := e.capacity(c.now)
		s.members[z]++
		s.capacity[z] += w
		s.total += w
		s.open[z] += e.inflight[1].Load()
		if !c.skipAvoid || e.address != c.avoid {
			s.count[z]++
		}
	}
}

// shares writes into out the fraction of requests each zone slot of l
// gets under the policy and reports true, or reports false when the pick
// is to be zone-blind: placement is off, or the own zone holds fewer
// than the minimum of usable endpoints.
//
//   - same-zone-first: everything to the own zone.
//   - spill-over (Envoy's rule): with u the own zone's share of the
//     usable capacity and d its expected share of the clients, a share
//     min(1, u/d) stays; the rest, (d-u)/d, the deficit relative to the
//     demand, goes to the other zones in proportion to their residual
//     capacity, max(0, u_z - d_z), or to their capacity if none has any.
func (p zonePolicy) shares(l *zoneLayout, s *zoneSums, out *[maxZones]float64) bool {
	if !l.on || s.members[0] < p.min || s.total <= 0 {
		return false
	}
	*out = [maxZones]float64{}
	if p.policy == ZonePolicySameZoneFirst {
		out[0] = 1
		return true
	}
	u, d := s.capacity[0]/s.total, l.expected[0]
	if u >= d*(1-1e-9) {
		out[0] = 1
		return true
	}
	out[0] = u / d
	spill := 1 - out[0]
	residual, rest := 0.0, 0.0
	for z := 1; z < l.n; z++ {
		residual += max(0, s.capacity[z]/s.total-l.expected[z])
		rest += s.capacity[z]
	}
	for z := 1; z < l.n; z++ {
		switch {
		case residual > 0:
			out[z] = spill * max(0, s.capacity[z]/s.total-l.expected[z]) / residual
		case rest > 0:
			out[z] = spill * s.capacity[z] / rest
		}
	}
	return true
}

// placeZone narrows c to the zone this pick goes to, or leaves it whole
// when the pick is zone-blind. A short request draws its zone with the
// zones' shares as probabilities; a long one goes to the zone whose open
// long requests lag its share most, so that watches settle at the shares
// without relying on chance.
func (p zonePolicy) placeZone(c *candidates, l *zoneLayout, kind Kind, rand func(int) int) {
	var s zoneSums
	s.add(c)
	var shares [maxZones]float64
	if !p.shares(l, &s, &shares) {
		return
	}
	// A zone whose only usable endpoint is the one avoided gives its
	// share to the others.
	open := 0.0
	for z := range l.n {
		if s.count[z] == 0 {
			shares[z] = 0
		}
		open += shares[z]
	}
	if open <= 0 {
		return
	}
	zone := -1
	if kind == Long {
		best := math.Inf(1)
		for z := range l.n {
			if shares[z] <= 0 {
				continue
			}
			if v := float64(s.open[z]+1) / shares[z]; v < best {
				best, zone = v, z
			}
		}
	} else {
		const scale = 1 << 20
		r := 0.0
		if shares[0] < open {
			r = open * float64(rand(scale)) / scale
		}
		for z := range l.n {
			if shares[z] <= 0 {
				continue
			}
			zone = z
			if r < shares[z] {
				break
			}
			r -= shares[z]
		}
	}
	c.zoned, c.zone, c.n = true, int32(zone), int(s.count[zone])
}

// endpointShares returns, aligned with eps, the share of long requests
// each endpoint is meant to hold under the zone policy: its zone's share
// split evenly among the zone's usable endpoints, or 1/n of the usable
// ones when placement is zone-blind. Unusable endpoints get 0.
func (b *Balancer) endpointShares(snap *snapshot, now int64, out []float64) {
	c := candidates{eps: snap.eps, now: now, skipEjected: true, honourEjected: true}
	var s zoneSums
	s.add(&c)
	var shares [maxZones]float64
	zoned := b.zones.shares(&snap.zones, &s, &shares)
	usable := 0
	for _, n := range s.members {
		usable += int(n)
	}
	for i, e := range snap.eps {
		switch z := e.zone.Load(); {
		case !c.usable(e):
			out[i] = 0
		case zoned:
			out[i] = shares[z] / float64(s.members[z])
		default:
			out[i] = 1 / float64(usable)
		}
	}
}
