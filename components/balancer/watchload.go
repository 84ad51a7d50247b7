package balancer

import "time"

// WatchLoad is what the watch rebalancer needs to know about one endpoint:
// whether new watches may go there, since when, and how many long-running
// requests it holds (the count placement equalises, see fewestLong).
type WatchLoad struct {
	Address string
	// Usable is true when a pick may choose the endpoint: not ejected,
	// not failing its probe, not draining or shutting down.
	Usable bool
	// UsableSince is when the endpoint last became usable as far as the
	// balancer has seen (added, probe passing again, back from an
	// ejection or a shutdown hold); the zero time for an endpoint of the
	// first snapshot that never went away.
	UsableSince time.Time
	// OpenLong counts the long-running requests open on it.
	OpenLong int64
	// Share is the fraction of the long-running requests the endpoint is
	// meant to hold: 1/n of the n usable endpoints, or under a zone
	// policy its zone's share split among the zone's usable endpoints
	// (see zone.go). 0 for an unusable endpoint, and for one outside the
	// zones the policy sends watches to: new watches do not go there.
	Share float64
}

// WatchLoads returns the load of every current endpoint, sorted by
// address. Like Endpoints it takes no lock; the fields of one endpoint are
// read one by one and may straddle a concurrent request.
func (b *Balancer) WatchLoads() []WatchLoad {
	snap := b.current.Load()
	eps := snap.eps
	now := time.Now().UnixNano()
	out := make([]WatchLoad, len(eps))
	shares := make([]float64, len(eps))
	b.endpointShares(snap, now, shares)
	for i, e := range eps {
		out[i] = WatchLoad{Address: e.address, Usable: e.usable(now), OpenLong: e.inflight[1].Load(), Share: shares[i]}
		if since := e.usableSince(); since > 0 {
			out[i].UsableSince = time.Unix(0, since)
		}
	}
	return out
}
