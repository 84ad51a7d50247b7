package client

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/transport"
)

// Option configures New and Wrap.
type Option func(*options)

type options struct {
	endpoints      string
	registerer     prometheus.Registerer
	log            *slog.Logger
	policy         string
	probeInterval  time.Duration
	watchRebalance bool
	skewRouting    bool
	discovery      *rest.Config
	startWait      time.Duration
	zone           zoneOptions
	endpointHeader bool
	upstreamHTTP2  transport.Client
	// tune edits the engine's Config last; tests shorten timings with it.
	tune func(*engine.Config)
}

// DefaultStartWait bounds how long New waits for the resolver's first
// endpoint set. Static lists publish at once; dns:/// and endpointslice:///
// publish the config's host until they first resolve. A request made
// before any set is known gets the sidecar's answer, 503 with
// Retry-After, which client-go retries.
const DefaultStartWait = 10 * time.Second

// defaults are the engine's (engine.Defaults), which are the sidecar's
// flag defaults. The logger is the program's default one: a library given
// no logger logs where the program does. This is the only place the
// library reads slog.Default; the engine gets the logger in its Config.
func defaults() options {
	d := engine.Defaults()
	return options{
		log:            slog.Default(),
		policy:         d.Balancer.Policy,
		probeInterval:  d.Probe.Interval,
		watchRebalance: d.WatchRebalance,
		skewRouting:    d.SkewRouting,
		upstreamHTTP2:  d.Transport.Client,
		startWait:      DefaultStartWait,
		zone:           zoneOptions{policy: d.Balancer.ZonePolicy, min: d.Balancer.ZoneMinEndpoints},
	}
}

// WithEndpoints sets where the apiservers are, in the sidecar's --endpoints
// grammar:
//
//	https://host:port[,https://host:port...]   a static list
//	dns:///name[:port]                         A/AAAA records of name, every 5s
//	endpointslice:///namespace/service[:port]  EndpointSlices of a Service
//
// The default, "", is the config's Host alone: balancing needs a list.
func WithEndpoints(spec string) Option { return func(o *options) { o.endpoints = spec } }

// WithRegisterer registers fanout's metrics (the sidecar's fanout_*
// series, see README.md) on reg; Close unregisters them. Without it
// nothing is registered. Two Balancers on one registry need
// prometheus.WrapRegistererWith to tell their series apart.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.registerer = reg }
}

// WithLogger sets the logger of endpoint changes, readiness changes and
// credential reloads; slog.Default() by default. A logger enabled at
// slog.LevelDebug-4 (the sidecar's -v 4) also gets one line per request as it ends: which apiserver answered, the status,
// the attempts, the duration (docs/troubleshooting.md).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithEndpointHeader adds, like the sidecar's --debug-endpoint-header,
// X-Fanout-Endpoint (the apiserver host:port that answered, or on
// fanout's own error the last one tried) and X-Fanout-Attempts (times
// the request was sent) to every response's header; off by default. A
// program reads them through a rest.Config WrapTransport, or from a raw
// response.
func WithEndpointHeader(on bool) Option { return func(o *options) { o.endpointHeader = on } }

// WithBalancerPolicy chooses balancer.PolicyLeastRequest (the default) or
// balancer.PolicyRoundRobin, like the sidecar's --balancer.
func WithBalancerPolicy(policy string) Option { return func(o *options) { o.policy = policy } }

// WithProbeInterval sets how often each endpoint's /readyz is probed with
// the config's credentials, like the sidecar's --probe-interval (default
// 2s); 0 disables probing.
func WithProbeInterval(d time.Duration) Option { return func(o *options) { o.probeInterval = d } }

// WithWatchRebalancing turns active watch rebalancing on (the default) or
// off, like the sidecar's --watch-rebalance: while one apiserver holds
// more than its share of the program's watches, fanout ends some of them
// between two events, at most 2 a second, and client-go's reflectors
// re-watch from their last resourceVersion on the least loaded one,
// without re-listing. A raw watch (Watch on a clientset) sees its result
// channel close, as when an apiserver ends a watch; turn rebalancing off
// if the program treats that as an error.
func WithWatchRebalancing(on bool) Option { return func(o *options) { o.watchRebalance = on } }

// WithUpstreamHTTP2 chooses the HTTP/2 client of the connections to the
// apiservers, as the sidecar's --upstream-http2: transport.ClientOwn (the
// default) or transport.ClientStd, net/http's, which exists to compare the
// two and has no answer window budget.
func WithUpstreamHTTP2(c transport.Client) Option { return func(o *options) { o.upstreamHTTP2 = c } }

// WithSkewRouting turns off (or on, the default) reading each apiserver's
// discovery to route requests by what it serves during an upgrade, and
// the retry of a 404 "no such path", as the sidecar's --skew-routing.
func WithSkewRouting(on bool) Option { return func(o *options) { o.skewRouting = on } }

// WithDiscoveryConfig sets the credentials the endpointslice:/// resolver
// lists and watches EndpointSlices with. The default is the config given
// to New, talking to its Host directly.
func WithDiscoveryConfig(cfg *rest.Config) Option { return func(o *options) { o.discovery = cfg } }

// WithStartWait bounds how long New waits for the first endpoint set
// (DefaultStartWait); 0 does not wait.
func WithStartWait(d time.Duration) Option { return func(o *options) { o.startWait = d } }

// zoneOptions are the zone placement settings (the sidecar's --zone,
// --zone-policy, --zone-min-endpoints and --endpoint-zones).
type zoneOptions struct {
	zone, policy, endpoints string
	min                     int
}

// WithZone sets the program's own topology zone and the zone policy, like
// the sidecar's --zone and --zone-policy: balancer.ZonePolicyOff (the
// default), balancer.ZonePolicySameZoneFirst or
// balancer.ZonePolicySpillOver. A program in a pod can read its zone
// from the pod's topology.kubernetes.io/zone label through the downward
// API. See docs/resilience.md, "Zone placement".
func WithZone(zone, policy string) Option {
	return func(o *options) { o.zone.zone, o.zone.policy = zone, policy }
}

// WithZoneMinEndpoints sets how many usable apiservers the own zone needs
// before the zone policy prefers it, like --zone-min-endpoints (default
// 2, so that a zone with one apiserver never pins the program to it).
func WithZoneMinEndpoints(n int) Option { return func(o *options) { o.zone.min = n } }

// WithEndpointZones gives static and DNS endpoints their zones, like
// --endpoint-zones: comma-separated KEY=ZONE, KEY a CIDR, an IP,
// host:port, a host or https://host:port.
func WithEndpointZones(spec string) Option { return func(o *options) { o.zone.endpoints = spec } }
