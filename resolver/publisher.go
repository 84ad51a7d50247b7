package resolver

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// errNoEndpoints is what a resolution that found nothing counts as: an
// empty set is never published, since the balancer would fail every request.
var errNoEndpoints = errors.New("resolved no endpoints")

// publisher sits between a dynamic resolver and its update callback and
// enforces the rules all of them share:
//
//   - an error or an empty result never replaces the last good set;
//   - until something resolved, the fallback (the kubeconfig's server)
//     is published on the first failure, so that fanout works meanwhile;
//   - an unchanged set is not published again;
//   - failures are logged once per transition, not once per attempt.
//
// It is used from the resolver's Run goroutine only.
type publisher struct {
	name     string // metrics label: dns, endpointslice
	update   func([]Endpoint)
	fallback []Endpoint
	log      *slog.Logger
	metrics  *Metrics

	last     []Endpoint // last published, nil before the first
	resolved bool       // last came from a resolution, not the fallback
	failing  bool
}

func (p *publisher) result(eps []Endpoint, err error) {
	if err == nil && len(eps) == 0 {
		err = errNoEndpoints
	}
	if err != nil {
		p.fail(err)
		return
	}
	p.metrics.succeeded(p.name)
	if p.failing {
		p.failing = false
		p.log.Info("endpoint resolution recovered", "resolver", p.name, "endpoints", len(eps))
	}
	p.resolved = true
	p.publish(eps)
}

func (p *publisher) fail(err error) {
	var serving string
	switch {
	case p.resolved:
		serving = fmt.Sprintf("the last known %d endpoints", len(p.last))
	case len(p.fallback) > 0:
		serving = "the kubeconfig's server, as nothing resolved yet"
	default:
		serving = "no endpoints, as nothing resolved yet"
	}
	p.metrics.failed(p.name, err, serving)
	if !p.failing {
		p.failing = true
		switch {
		case p.resolved:
			p.log.Warn("endpoint resolution failed; keeping the last resolved endpoints", "resolver", p.name, "error", err, "endpoints", addresses(p.last))
		case len(p.fallback) > 0:
			p.log.Warn("endpoint resolution failed and nothing resolved yet; using the kubeconfig's server", "resolver", p.name, "error", err, "endpoints", addresses(p.fallback))
		default:
			p.log.Warn("endpoint resolution failed and nothing resolved yet; no endpoints", "resolver", p.name, "error", err)
		}
	}
	if !p.resolved && len(p.fallback) > 0 {
		p.publish(p.fallback)
	}
}

func (p *publisher) publish(eps []Endpoint) {
	eps = normalize(eps)
	if p.last != nil && slices.Equal(p.last, eps) {
		return
	}
	p.last = eps
	p.update(slices.Clone(eps))
}

// normalize sorts by address and merges duplicates: an address is draining
// only if every copy says so, since during a slice rewrite one slice may
// still list it the old way. The first non-empty zone wins.
func normalize(eps []Endpoint) []Endpoint {
	out := slices.Clone(eps)
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.Address, b.Address) })
	j := 0
	for i := range out {
		if j > 0 && out[j-1].Address == out[i].Address {
			prev := &out[j-1]
			prev.Draining = prev.Draining && out[i].Draining
			if prev.Zone == "" {
				prev.Zone = out[i].Zone
			}
			continue
		}
		out[j] = out[i]
		j++
	}
	return out[:j]
}

func addresses(eps []Endpoint) []string {
	out := make([]string, len(eps))
	for i, ep := range eps {
		out[i] = ep.Address
	}
	return out
}
