package client

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/health"
)

// Option configures New and Wrap.
type Option func(*options)

type options struct {
	endpoints     string
	registerer    prometheus.Registerer
	log           *slog.Logger
	policy        string
	probeInterval time.Duration
	discovery     *rest.Config
	startWait     time.Duration
}

// DefaultStartWait bounds how long New waits for the resolver's first
// endpoint set. Static lists publish at once; dns:/// and endpointslice:///
// publish the config's host until they first resolve. A request made
// before any set is known gets the sidecar's answer, 503 with
// Retry-After, which client-go retries.
const DefaultStartWait = 10 * time.Second

func defaults() options {
	return options{
		log:           slog.Default(),
		policy:        balancer.PolicyLeastRequest,
		probeInterval: health.DefaultInterval,
		startWait:     DefaultStartWait,
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
// credential reloads; slog.Default() by default.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithBalancerPolicy chooses balancer.PolicyLeastRequest (the default) or
// balancer.PolicyRoundRobin, like the sidecar's --balancer.
func WithBalancerPolicy(policy string) Option { return func(o *options) { o.policy = policy } }

// WithProbeInterval sets how often each endpoint's /readyz is probed with
// the config's credentials, like the sidecar's --probe-interval (default
// 2s); 0 disables probing.
func WithProbeInterval(d time.Duration) Option { return func(o *options) { o.probeInterval = d } }

// WithDiscoveryConfig sets the credentials the endpointslice:/// resolver
// lists and watches EndpointSlices with. The default is the config given
// to New, talking to its Host directly.
func WithDiscoveryConfig(cfg *rest.Config) Option { return func(o *options) { o.discovery = cfg } }

// WithStartWait bounds how long New waits for the first endpoint set
// (DefaultStartWait); 0 does not wait.
func WithStartWait(d time.Duration) Option { return func(o *options) { o.startWait = d } }
