// Package sidecar is the sidecar's composition root: it turns the
// command-line Options into an engine.Config and an fx application that
// runs the engine (components/engine: credentials, resolver, balancer,
// prober, transports, proxy handler, watch rebalancer, state log) between
// the sidecar's own parts: the loopback listener in front of the engine's
// handler, the admin server, and the kubeconfig written for the client once
// the listener is bound. client.New builds the same engine from a
// rest.Config. See docs/architecture.md.
package sidecar

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/internal/metrics"
	"github.com/fanout-dev/fanout/resolver"
)

// Sidecar returns the fx options of the sidecar for validated options.
// Configuration errors come back as fx.Error so the app fails before it
// starts anything.
func Sidecar(o Options, log *slog.Logger) fx.Option {
	cfg, err := EngineConfig(o, log)
	if err != nil {
		return fx.Error(err)
	}
	// startup turns /startupz green once the hook below has run.
	startup := admin.NewStartup()
	listener, localCA, err := listenerConfig(o)
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
			admin.Config{ListenAddress: o.AdminAddress, EnablePprof: o.EnablePprof},
		),
		Metrics,
		// Built first (the admin server below needs it), so its hooks are
		// appended first: fx stops in reverse order, and the engine stops
		// after the listener drained and the admin server stopped.
		fx.Provide(func(lc fx.Lifecycle, reg prometheus.Registerer, log *slog.Logger) (*engine.Engine, error) {
			return newEngine(lc, cfg, reg, log)
		}),
		fx.Provide(
			func(e *engine.Engine) admin.State { return e },
			func(e *engine.Engine) admin.ResolverStatus { return e.ResolverStatus() },
		),
		// admin before the listener: /readyz and /metrics keep answering
		// while the listener drains.
		admin.Module,
		fx.Provide(func(lc fx.Lifecycle, e *engine.Engine) *proxy.Server {
			s := e.NewServer(listener)
			lc.Append(fx.StartStopHook(s.Start, s.Stop))
			return s
		}),
		fx.Invoke(func(log *slog.Logger, reg prometheus.Registerer) error { return reportInsecure(o, log, reg) }),
		fx.Supply(startup),
		fx.Invoke(func(lc fx.Lifecycle, s *proxy.Server) {
			lc.Append(fx.StartHook(func() error {
				// The listener's start hook has run: it is bound.
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

// newEngine builds the engine with the app's registry and logger and runs
// it for the app's lifetime.
func newEngine(lc fx.Lifecycle, cfg engine.Config, reg prometheus.Registerer, log *slog.Logger) (*engine.Engine, error) {
	cfg.Registerer, cfg.Log = reg, log
	e, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
	return e, nil
}

// EngineConfig is the engine's Config for validated options: the client's
// identity (--kubeconfig or --in-cluster), --endpoints and its discovery
// credentials, --tls-server-name and the resilience, probe and rebalancing
// flags. The listener's flags are not in it (listenerConfig), nor the
// registry, which the app supplies.
func EngineConfig(o Options, log *slog.Logger) (engine.Config, error) {
	up, err := loadUpstream(o)
	if err != nil {
		return engine.Config{}, err
	}
	cfg := engine.Config{
		Upstream:       up,
		Endpoints:      o.Endpoints,
		Discovery:      func() (resolver.APIServer, error) { return discoveryAPIServer(o, log) },
		Balancer:       balancerConfig(o),
		Proxy:          proxyConfig(o),
		Probe:          proberConfig(o),
		WatchRebalance: o.Rebalance.Enabled,
		Rebalance:      o.Rebalance.config(),
		Log:            log,
	}
	// The kubeconfig's tls-server-name otherwise (engine.Config.Transport).
	cfg.Transport.ServerName = o.TLSServerName
	if err := cfg.Validate(); err != nil {
		return engine.Config{}, err
	}
	return cfg, nil
}

// discoveryAPIServer returns where and as whom the endpointslice
// resolver reads EndpointSlices (--discovery-kubeconfig): by default the
// client's own kubeconfig, which talks to its server directly rather than
// through fanout. The credentials' files are watched while the resolver
// runs, as the client's are.
func discoveryAPIServer(o Options, log *slog.Logger) (resolver.APIServer, error) {
	up, err := discoveryUpstream(o)
	if err != nil {
		return resolver.APIServer{}, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	creds, err := certs.NewCredentialsWithOptions(up, certs.Options{Log: log.With("for", "discovery")})
	if err != nil {
		return resolver.APIServer{}, fmt.Errorf("discovery credentials: %w", err)
	}
	return resolver.APIServer{
		URL:       up.Server.String(),
		Transport: certs.NewRoundTripper(creds, up.ServerName),
		Start:     creds.Start,
		Stop:      creds.Stop,
	}, nil
}

// discoveryUpstream loads the discovery credentials: the same kinds of
// kubeconfig fanout takes for the client (LoadKubeconfig), or the pod's
// service account.
func discoveryUpstream(o Options) (*certs.Upstream, error) {
	switch o.DiscoveryKubeconfig {
	case DiscoveryInCluster:
		up, err := certs.LoadInCluster(inClusterPaths)
		if err != nil {
			return nil, fmt.Errorf("--discovery-kubeconfig %s: %w", DiscoveryInCluster, err)
		}
		return up, nil
	case "":
		if o.InCluster {
			up, err := certs.LoadInCluster(inClusterPaths)
			if err != nil {
				return nil, fmt.Errorf("--in-cluster for discovery: %w", err)
			}
			return up, nil
		}
		up, err := certs.LoadKubeconfig(o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s for discovery: %w; pass --discovery-kubeconfig", o.Kubeconfig, err)
		}
		return up, nil
	}
	up, err := certs.LoadKubeconfig(o.DiscoveryKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--discovery-kubeconfig %s: %w", o.DiscoveryKubeconfig, err)
	}
	return up, nil
}

// Metrics provides one Prometheus registry as both Registerer and Gatherer,
// with the Go runtime and process collectors and fanout_build_info.
var Metrics = metrics.Module
