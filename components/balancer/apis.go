package balancer

import "sync/atomic"

// Version skew: during an upgrade, apiservers of two releases serve
// different group/versions and resources. A request for one of them goes
// only to endpoints that serve it, as far as fanout knows (see
// docs/resilience.md, "Version skew"). What each endpoint serves is read
// from its discovery documents by components/apis and handed to the
// balancer whole through SetAPIs.

// API is what a resource request is about, as kube-apiserver's
// RequestInfo names it: the core group is "". An apiserver serves the
// request only if it serves the group/version, the resource in it and,
// if any, the subresource. The zero API (Resource "") is a request that is
// not about a resource: discovery, /version, /healthz; it is never
// filtered.
type API struct {
	Group, Version, Resource, Subresource string
}

// APIs reports which endpoints serve which APIs. Both methods are called
// on the request path, concurrently with everything: they must not block
// nor allocate. An implementation is an immutable snapshot; a change is a
// new one given to SetAPIs.
type APIs interface {
	// Differ reports whether the endpoints are known to serve different
	// APIs. While it is false, picks ignore Serves: the usual case costs
	// nothing.
	Differ() bool
	// Serves reports whether the endpoint at address serves api. An
	// endpoint whose discovery is not known yet serves everything, so
	// that no request waits for discovery.
	Serves(address string, api API) bool
	// Version returns the endpoint's kube-apiserver version (its /version
	// gitVersion), "" if unknown. It is for /debug/endpoints, not picks.
	Version(address string) string
}

// apisBox holds an APIs in an atomic.Pointer.
type apisBox struct{ APIs }

// SetAPIs replaces what the balancer knows of the APIs each endpoint
// serves; nil forgets it (every endpoint serves everything, and
// PickInfo.Served finds no endpoint). It may be called concurrently with
// everything.
func (b *Balancer) SetAPIs(a APIs) {
	if a == nil {
		b.apis.Store(nil)
		return
	}
	b.apis.Store(&apisBox{a})
}

// Serves reports whether the endpoint at address serves api, as far as
// the balancer knows: true when it knows nothing of the APIs. The watch
// rebalancer asks it before moving a watch.
func (b *Balancer) Serves(address string, api API) bool {
	box := b.apis.Load()
	return box == nil || api.Resource == "" || box.Serves(address, api)
}

// version returns the endpoint's version as the APIs know it, "" if not.
func (b *Balancer) version(address string) string {
	if box := b.apis.Load(); box != nil {
		return box.Version(address)
	}
	return ""
}

// SkewRouted returns how many picks left out an endpoint because it does
// not serve the request's API (fanout_skew_routed_total).
func (b *Balancer) SkewRouted() uint64 { return b.p.skewRouted.Load() }

// servedFilter returns the APIs a pick for api must filter with: nil
// when there is nothing to filter (no table, no skew, not a resource
// request), unless always, for PickInfo.Served, which filters whenever a
// table exists.
func (b *Balancer) servedFilter(api API, always bool) APIs {
	box := b.apis.Load()
	if box == nil || api.Resource == "" || (!always && !box.Differ()) {
		return nil
	}
	return box.APIs
}

// filterServed narrows c to the endpoints that serve its API, if at
// least one of them is up: when none is, the pick goes on as if nothing
// were known, and the apiserver it reaches answers for itself (its own
// 404 if it does not serve the API either). It counts the pick in
// skewRouted when an endpoint is left out. Called by newCandidates before
// it counts.
func (c *candidates) filterServed(apis APIs, api API, routed *atomic.Uint64) {
	if apis == nil {
		return
	}
	served, unserved := 0, 0
	for _, e := range c.eps {
		switch {
		case !apis.Serves(e.address, api):
			unserved++
		case c.up(e):
			served++
		}
	}
	if served == 0 || unserved == 0 {
		return
	}
	c.apis, c.api, c.skipUnserved = apis, api, true
	routed.Add(1)
}

// servedCandidates keeps the usable endpoints other than avoid that serve
// api by apis, with no relaxation: n may be 0 (PickInfo.Served).
func servedCandidates(eps []*Endpoint, now int64, avoid string, maxEjected float64, apis APIs, api API) candidates {
	c := newCandidates(eps, now, avoid, maxEjected, nil, API{}, nil)
	c.skipEjected, c.skipAvoid, c.n = true, true, 0
	c.apis, c.api, c.skipUnserved = apis, api, true
	for _, e := range eps {
		if c.usable(e) {
			c.n++
		}
	}
	return c
}
