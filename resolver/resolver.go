// Package resolver discovers kube-apiserver endpoints and pushes them to the
// balancer as full snapshots.
//
// A Resolver never sends deltas: every update carries the complete, current
// set of endpoints, so a consumer can rebuild its state from one update alone.
//
// Three resolvers exist: Static (a fixed list), DNS (A/AAAA records looked
// up periodically) and EndpointSlices (a Service's EndpointSlices, listed
// and watched). The dynamic ones never publish an empty set: a failed or
// empty resolution keeps the last good one, and until the first success
// they publish the kubeconfig's server so that fanout works meanwhile.
package resolver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Endpoint is one kube-apiserver instance, addressed as host:port.
type Endpoint struct {
	// Address is the dial address, "host:port" (IPv6 hosts in brackets).
	Address string
	// Draining marks an endpoint that is still serving but should take no
	// new requests, so that those in flight (watches above all) finish
	// where they are: an EndpointSlice endpoint that is terminating, or
	// serving but not ready. Consumers keep it known; only the
	// endpointslice resolver sets it.
	Draining bool
	// Zone is the endpoint's topology zone when discovery knows it, for
	// information; empty otherwise.
	Zone string
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

// Config is what Parse needs besides the spec.
type Config struct {
	// Fallback is the kubeconfig's server. It is the endpoint of an empty
	// spec, and what the dynamic resolvers publish until they first
	// resolve something.
	Fallback *url.URL
	// Discovery returns where and with what credentials the
	// endpointslice resolver lists and watches EndpointSlices. Only
	// called for that scheme.
	Discovery func() (APIServer, error)
	Log       *slog.Logger // discards if nil
	Metrics   *Metrics     // nil records nothing
}

// Parse turns an --endpoints value into a Resolver.
//
// Grammar:
//
//	https://host:port[,https://host:port...]   a static list
//	dns:///name[:port]                         A/AAAA records of name, every 5s (port 443 by default)
//	endpointslice:///namespace/service[:port]  EndpointSlices of a Service; port is a port name
//	endpointslice:///namespace/*               EndpointSlices of the Service the kubeconfig's server names
//
// An empty spec means the kubeconfig server alone (c.Fallback). For the
// "*" form see ServerService.
func Parse(spec string, c Config) (Resolver, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		if c.Fallback == nil {
			return nil, fmt.Errorf("no --endpoints given and the kubeconfig has no server URL")
		}
		ep, err := endpointFromURL(c.Fallback.String())
		if err != nil {
			return nil, fmt.Errorf("kubeconfig server: %w", err)
		}
		return Static{Endpoints: []Endpoint{ep}}, nil
	}
	if scheme, after, ok := strings.Cut(spec, "://"); ok {
		switch scheme {
		case "dns":
			return parseDNS(spec, after, c)
		case "endpointslice":
			return parseEndpointSlice(spec, after, c)
		}
	}
	return parseStatic(spec)
}

func parseStatic(spec string) (Resolver, error) {
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

// fallback is the kubeconfig server as an endpoint list, empty if unusable:
// the dynamic resolvers then publish nothing until they resolve.
func (c Config) fallback() []Endpoint {
	if c.Fallback == nil {
		return nil
	}
	ep, err := endpointFromURL(c.Fallback.String())
	if err != nil {
		return nil
	}
	return []Endpoint{ep}
}

// parseDNS accepts dns:///name[:port]. after is what follows "dns://".
func parseDNS(spec, after string, c Config) (Resolver, error) {
	hostport, ok := strings.CutPrefix(after, "/")
	if !ok || strings.Contains(hostport, "/") {
		return nil, fmt.Errorf("--endpoints %q: expected dns:///name:port (three slashes; a DNS server cannot be chosen)", spec)
	}
	host, port := hostport, "443"
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") || strings.Count(hostport, ":") == 1 {
		return nil, fmt.Errorf("--endpoints %q: %v; expected dns:///name:port", spec, err)
	}
	if host == "" {
		return nil, fmt.Errorf("--endpoints %q has no name; expected dns:///name:port", spec)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("--endpoints %q: port %q is not a number in 1-65535; expected dns:///name:port", spec, port)
	}
	return &DNS{Host: host, Port: port, Fallback: c.fallback(), Log: c.Log, Metrics: c.Metrics}, nil
}

// ServerServiceWildcard, as the Service of an endpointslice:/// spec,
// stands for the Service that the kubeconfig's server names
// (ServerService).
const ServerServiceWildcard = "*"

// ServerService returns the Service that server's host names, the way a
// pod in namespace ns resolves it through cluster DNS: "svc" (the pod's
// own namespace, as its DNS search path does), "svc.other",
// "svc.other.svc" and "svc.other.svc.<cluster domain>". A hosted control
// plane's clients reach their kube-apiserver as https://kube-apiserver,
// the Service beside them in the hosting cluster (Gardener: generic-
// token-kubeconfig). An IP address, or a name of more labels whose third
// is not "svc", names no Service: why says so.
func ServerService(server *url.URL, ns string) (namespace, service, why string) {
	if server == nil || server.Hostname() == "" {
		return "", "", "the kubeconfig has no server"
	}
	host := strings.TrimSuffix(server.Hostname(), ".")
	if net.ParseIP(host) != nil {
		return "", "", fmt.Sprintf("the server %s is an IP address, not a Service name", host)
	}
	labels := strings.Split(host, ".")
	switch {
	case len(labels) == 1:
	case len(labels) == 2 || labels[2] == "svc":
		ns = labels[1]
	default:
		return "", "", fmt.Sprintf("the server %s is not a Service name (service, service.namespace or service.namespace.svc[.domain])", host)
	}
	if err := checkService(labels[0]); err != nil {
		return "", "", fmt.Sprintf("the server %s: %q is not a Service name: %v", host, labels[0], err)
	}
	if err := checkNamespace(ns); err != nil {
		return "", "", fmt.Sprintf("the server %s: %q is not a namespace: %v", host, ns, err)
	}
	return ns, labels[0], ""
}

// parseEndpointSlice accepts endpointslice:///namespace/service[:port-name]
// and endpointslice:///namespace/* (ServerServiceWildcard).
func parseEndpointSlice(spec, after string, c Config) (Resolver, error) {
	const want = "expected endpointslice:///namespace/service[:port-name] or endpointslice:///namespace/*"
	path, ok := strings.CutPrefix(after, "/")
	ns, svc, ok2 := strings.Cut(path, "/")
	if !ok || !ok2 || strings.Contains(svc, "/") {
		return nil, fmt.Errorf("--endpoints %q: %s", spec, want)
	}
	svc, port, hasPort := strings.Cut(svc, ":")
	if err := checkNamespace(ns); err != nil {
		return nil, fmt.Errorf("--endpoints %q: namespace %q: %v; %s", spec, ns, err, want)
	}
	if svc == ServerServiceWildcard {
		var why string
		if ns, svc, why = ServerService(c.Fallback, ns); why != "" {
			// Not an error: a hosted control plane's client may be
			// pointed at an address outside the namespace, and a
			// sidecar that refused to start would stop the client too.
			logger(c.Log).Warn("--endpoints names the kubeconfig server's Service, but the server names none: using the kubeconfig's server alone",
				"endpoints", spec, "reason", why)
			if ep := c.fallback(); len(ep) > 0 {
				return Static{Endpoints: ep}, nil
			}
			return nil, fmt.Errorf("--endpoints %q: %s, and the kubeconfig has no usable server", spec, why)
		}
	}
	if err := checkService(svc); err != nil {
		return nil, fmt.Errorf("--endpoints %q: service %q: %v; %s", spec, svc, err, want)
	}
	if hasPort {
		if err := checkPortName(port); err != nil {
			return nil, fmt.Errorf("--endpoints %q: port name %q: %v; %s", spec, port, err, want)
		}
	}
	if c.Discovery == nil {
		return nil, fmt.Errorf("--endpoints %q: no credentials for discovery", spec)
	}
	api, err := c.Discovery()
	if err != nil {
		return nil, fmt.Errorf("--endpoints %q: discovery credentials: %w", spec, err)
	}
	// Checked now, so that a bad URL fails at start rather than in Run.
	if _, err := newSliceClient(api, ns, svc); err != nil {
		return nil, fmt.Errorf("--endpoints %q: %w", spec, err)
	}
	return &EndpointSlices{
		APIServer: api, Namespace: ns, Service: svc, PortName: port,
		Fallback: c.fallback(), Log: c.Log, Metrics: c.Metrics,
	}, nil
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
	if h := u.Hostname(); net.ParseIP(h) == nil && !isHostName(h) {
		return Endpoint{}, fmt.Errorf("%q: host %q is neither an IP address nor a DNS name", raw, h)
	}
	if u.Fragment != "" {
		return Endpoint{}, fmt.Errorf("%q: an endpoint is only https://host:port, without a #fragment", raw)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Endpoint{}, fmt.Errorf("%q: port %s is not between 1 and 65535", raw, port)
	}
	return Endpoint{Address: net.JoinHostPort(u.Hostname(), port)}, nil
}

// isHostName reports whether h can be a DNS name: letters, digits, '-' and
// '.', at most 253 characters.
func isHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
