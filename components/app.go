// Package components is the sidecar's composition root: it turns the
// command-line Options into an fx application of the packages that do the
// work (certs, resolver, balancer, health, transport, proxy, admin).
//
// A request enters the proxy, which asks the balancer for an endpoint and
// sends it through the transport's pool for that endpoint, authenticated
// with the certs credentials. Endpoint snapshots take the other way:
// RunResolver, defined here, feeds each one to the balancer, the prober,
// the resolver metrics and then the transports, which drop the pools of
// endpoints that went away. The prober probes over pools of its own
// (ProbeTransports) and reports readiness to the balancer; the watch
// rebalancer reads the balancer's loads and ends watches in the proxy.
//
// Besides choosing implementations from the validated Options, this file
// loads the client's kubeconfig, runs the resolver loop and, once the proxy
// listens, writes the kubeconfig for the client. client.New wires the same
// packages for the library without fx.
package components

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/metrics"
	"github.com/fanout-dev/fanout/resolver"
)

// Sidecar returns the fx options of the sidecar for validated options.
// Configuration errors come back as fx.Error so the app fails before it
// starts anything.
func Sidecar(o Options, log *slog.Logger) fx.Option {
	up, err := loadUpstream(o)
	if err != nil {
		return fx.Error(err)
	}
	resolverMetrics := resolver.NewMetrics()
	res, err := resolver.Parse(o.Endpoints, resolver.Config{
		Fallback:  up.Server,
		Discovery: func() (*rest.Config, error) { return discoveryConfig(o) },
		Log:       log,
		Metrics:   resolverMetrics,
	})
	if err != nil {
		return fx.Error(err)
	}
	// startup turns /startupz green once the hook below has run.
	startup := admin.NewStartup()
	serverName := up.ServerName
	if o.TLSServerName != "" {
		serverName = o.TLSServerName
	}
	proxyCfg, localCA, err := listenerConfig(o)
	if err != nil {
		return fx.Error(err)
	}
	return fx.Options(
		fx.WithLogger(func() fxevent.Logger {
			if o.Verbosity >= 2 {
				return &fxevent.SlogLogger{Logger: log}
			}
			return fxevent.NopLogger
		}),
		// Watches end at once on stop; the grace period is for short
		// requests, plus a little for the rest of the teardown.
		fx.StopTimeout(o.ShutdownGrace+5*time.Second),
		fx.Supply(
			log,
			up,
			fx.Annotate(res, fx.As(new(resolver.Resolver))),
			resolverMetrics,
			balancerConfig(o),
			transport.Config{ServerName: serverName},
			proxyCfg,
			admin.Config{ListenAddress: o.AdminAddress, EnablePprof: o.EnablePprof},
		),
		Metrics,
		fx.Invoke(func(reg prometheus.Registerer) error { return reg.Register(resolverMetrics) }),
		certs.Module,
		fx.Provide(func(c *certs.Credentials) transport.Credentials { return c }),
		balancer.Module,
		transport.Module,
		fx.Provide(
			func(b *balancer.Balancer) proxy.Picker { return b },
			func(t *transport.Transports) proxy.Upstream { return t },
			func(t *transport.Transports) proxy.UpgradeDialer { return t },
			func(b *balancer.Balancer) admin.State { return b },
			func(m *resolver.Metrics) admin.ResolverStatus { return m },
		),
		// admin before proxy: fx stops in reverse order, so /readyz and
		// /metrics keep answering while the proxy drains.
		admin.Module,
		proxy.Module,
		probing(proberConfig(o)),
		rebalancing(o.Rebalance),
		fx.Invoke(routeKlog),
		fx.Invoke(func(log *slog.Logger, reg prometheus.Registerer) error { return reportInsecure(o, log, reg) }),
		fx.Invoke(RunResolver),
		fx.Invoke(logEndpointStates),
		fx.Supply(startup),
		fx.Invoke(func(lc fx.Lifecycle, s *proxy.Server) {
			lc.Append(fx.StartHook(func() error {
				// The proxy module's start hook has run: the listener is bound.
				addr := s.Addr().String()
				if localCA != nil {
					log.Info("proxy listening", "address", addr, "protocols", "HTTP/2 and HTTP/1.1 over TLS, client certificate required")
				} else {
					log.Info("proxy listening", "address", addr, "protocols", "HTTP/1.1, h2c")
				}
				if o.WriteKubeconfig == "" {
					startup.Done()
					return nil
				}
				if err := writeClientKubeconfig(o.WriteKubeconfig, addr, localCA); err != nil {
					return fmt.Errorf("--write-kubeconfig: %w", err)
				}
				log.Info("wrote client kubeconfig", "path", o.WriteKubeconfig, "server", clientURL(addr, localCA))
				startup.Done()
				return nil
			}))
		}),
	)
}

// discoveryConfig returns the credentials of the endpointslice resolver
// (--discovery-kubeconfig): by default the client's own kubeconfig, which
// talks to its server directly rather than through fanout.
func discoveryConfig(o Options) (*rest.Config, error) {
	switch o.DiscoveryKubeconfig {
	case DiscoveryInCluster:
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--discovery-kubeconfig %s: %w", DiscoveryInCluster, err)
		}
		return c, nil
	case "":
		if o.InCluster {
			c, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("--in-cluster for discovery: %w", err)
			}
			return c, nil
		}
		c, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s for discovery: %w; pass --discovery-kubeconfig", o.Kubeconfig, err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", o.DiscoveryKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--discovery-kubeconfig %s: %w", o.DiscoveryKubeconfig, err)
	}
	return c, nil
}

// Metrics provides one Prometheus registry as both Registerer and Gatherer,
// with the Go runtime and process collectors and fanout_build_info.
var Metrics = metrics.Module

// probing adds the readiness prober unless --probe-interval is 0. Without
// it RunResolver gets a nil *health.Prober and feeds the balancer alone.
func probing(cfg health.Config) fx.Option {
	if cfg.Interval == 0 {
		return fx.Options()
	}
	return fx.Options(
		fx.Supply(cfg),
		fx.Provide(
			newProbeTransports,
			func(t *ProbeTransports) health.Upstream { return t },
			func(b *balancer.Balancer, r resolver.Resolver) health.Sink { return health.WithResolveOnFailure(b, r) },
		),
		health.Module,
	)
}

// endpointSink receives resolver snapshots.
type endpointSink interface {
	Update([]resolver.Endpoint)
}

// sinks feeds one snapshot to each sink in order.
type sinks []endpointSink

func (s sinks) Update(eps []resolver.Endpoint) {
	for _, x := range s {
		x.Update(eps)
	}
}

// ResolverParams are RunResolver's dependencies. Prober is absent when
// probing is off.
type ResolverParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Resolver   resolver.Resolver
	Balancer   *balancer.Balancer
	Transports *transport.Transports
	Prober     *health.Prober `optional:"true"`
	// ProbeTransports is the prober's own pool set, absent with probing.
	ProbeTransports *ProbeTransports `optional:"true"`
	// Metrics counts published endpoints by state; absent in tests.
	Metrics *resolver.Metrics `optional:"true"`
	Log     *slog.Logger
}

// poolRetainer drops connection pools of endpoints that went away.
type poolRetainer interface {
	Retain(addresses []string)
}

// RunResolver runs the resolver for the app's lifetime and feeds its
// snapshots to the balancer, then the prober, then the resolver metrics,
// then the transport. The balancer goes first so that it knows a new
// endpoint before the prober's first report about it; the transport last,
// as the prober's Update returns only once probes of removed endpoints have
// ended, so none of them can recreate a pool that Retain just dropped.
func RunResolver(p ResolverParams) {
	sink := sinks{p.Balancer}
	if p.Prober != nil {
		sink = append(sink, p.Prober)
	}
	if p.Metrics != nil {
		sink = append(sink, p.Metrics)
	}
	pools := retainers{p.Transports}
	if p.ProbeTransports != nil {
		pools = append(pools, p.ProbeTransports)
	}
	runResolver(p.Lifecycle, p.Resolver, sink, pools, p.Log)
}

func runResolver(lc fx.Lifecycle, r resolver.Resolver, sink endpointSink, pools poolRetainer, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.Run(ctx, func(eps []resolver.Endpoint) {
					addrs := make([]string, len(eps))
					var draining []string
					for i, ep := range eps {
						addrs[i] = ep.Address
						if ep.Draining {
							draining = append(draining, ep.Address)
						}
					}
					if len(draining) > 0 {
						log.Info("endpoints updated", "endpoints", addrs, "draining", draining)
					} else {
						log.Info("endpoints updated", "endpoints", addrs)
					}
					sink.Update(eps)
					pools.Retain(addrs)
				})
				if err != nil && ctx.Err() == nil {
					log.Error("endpoint resolver stopped; keeping the last known endpoints", "error", err)
				}
			}()
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			wg.Wait()
			return nil
		},
	})
}

// Compile-time checks that the concrete types meet the consumer-side
// interfaces they are wired to.
var (
	_ proxy.Picker          = (*balancer.Balancer)(nil)
	_ proxy.Upstream        = (*transport.Transports)(nil)
	_ proxy.UpgradeDialer   = (*transport.Transports)(nil)
	_ admin.State           = (*balancer.Balancer)(nil)
	_ admin.ResolverStatus  = (*resolver.Metrics)(nil)
	_ transport.Credentials = (*certs.Credentials)(nil)
	_ endpointSink          = (*balancer.Balancer)(nil)
	_ endpointSink          = (*health.Prober)(nil)
	_ endpointSink          = (*resolver.Metrics)(nil)
	_ health.Upstream       = (*transport.Transports)(nil)
	_ health.Sink           = (*balancer.Balancer)(nil)
	_ health.ResolveNower   = (*resolver.DNS)(nil)
	_ poolRetainer          = (*transport.Transports)(nil)
)
