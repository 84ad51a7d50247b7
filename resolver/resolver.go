// Package resolver discovers kube-apiserver endpoints and pushes them to the
// balancer as full snapshots.
//
// A Resolver never sends deltas: every update carries the complete, current
// set of endpoints, so a consumer can rebuild its state from one update alone.
package resolver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
)

// Endpoint is one kube-apiserver instance, addressed as host:port.
type Endpoint struct {
	// Address is the dial address, "host:port" (IPv6 hosts in brackets).
	Address string
}

// Resolver discovers endpoints.
//
// Run blocks until ctx is done or the resolver fails for good. It calls update
// from a single goroutine, never concurrently, each time with a full snapshot
// sorted by Address. update must not retain or modify the slice after it
// returns.
type Resolver interface {
	Run(ctx context.Context, update func([]Endpoint)) error
}

// Static is a fixed list of endpoints.
type Static struct {
	Endpoints []Endpoint
}

var _ Resolver = Static{}

// Run publishes the list once and waits for ctx.
func (s Static) Run(ctx context.Context, update func([]Endpoint)) error {
	update(append([]Endpoint(nil), s.Endpoints...))
	<-ctx.Done()
	return nil
}

// Parse turns an --endpoints value into a Resolver.
//
// Grammar:
//
//	https://host:port[,https://host:port...]   a static list
//	dns:///name:port                           DNS A/AAAA records (reserved)
//	endpointslice:///namespace/name            EndpointSlices of a Service (reserved)
//
// An empty spec means the kubeconfig server alone (defaultServer).
func Parse(spec string, defaultServer *url.URL) (Resolver, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		if defaultServer == nil {
			return nil, fmt.Errorf("no --endpoints given and the kubeconfig has no server URL")
		}
		ep, err := endpointFromURL(defaultServer.String())
		if err != nil {
			return nil, fmt.Errorf("kubeconfig server: %w", err)
		}
		return Static{Endpoints: []Endpoint{ep}}, nil
	}
	if scheme, _, ok := strings.Cut(spec, "://"); ok {
		switch scheme {
		case "dns", "endpointslice":
			return nil, fmt.Errorf("--endpoints %q: the %s resolver is not available in this build; use a static list of https://host:port", spec, scheme)
		}
	}
	seen := map[string]bool{}
	var eps []Endpoint
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ep, err := endpointFromURL(part)
		if err != nil {
			return nil, fmt.Errorf("--endpoints: %w", err)
		}
		if seen[ep.Address] {
			continue
		}
		seen[ep.Address] = true
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("--endpoints %q lists no endpoint; expected https://host:port[,https://host:port...]", spec)
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Address < eps[j].Address })
	return Static{Endpoints: eps}, nil
}

// endpointFromURL accepts https://host[:port] (port defaults to 443).
func endpointFromURL(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%q is not a URL: %v; expected https://host:port", raw, err)
	}
	if u.Scheme != "https" {
		return Endpoint{}, fmt.Errorf("%q: scheme must be https (fanout speaks mTLS to kube-apiserver); expected https://host:port", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return Endpoint{}, fmt.Errorf("%q has no host; expected https://host:port", raw)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return Endpoint{}, fmt.Errorf("%q: an endpoint is only https://host:port, without path, query or user info", raw)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return Endpoint{Address: net.JoinHostPort(u.Hostname(), port)}, nil
}
