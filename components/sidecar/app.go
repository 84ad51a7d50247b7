// Package sidecar is the sidecar's composition root: the command-line
// flags write into one Config, and App turns it into an fx application
// that runs the engine (components/engine: credentials, resolver, balancer,
// prober, transports, proxy handler, watch rebalancer, state log) between
// the sidecar's own parts: the loopback listener in front of the engine's
// handler, the admin server, and the kubeconfig written for the client once
// the listener is bound. client.New builds the same engine from a
// rest.Config. See docs/architecture.md.
package sidecar

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/internal/metrics"
	"github.com/fanout-dev/fanout/resolver"
)

// App returns the fx options of the sidecar for a validated Config.
// Configuration errors (an unreadable kubeconfig, a missing directory for
// --write-kubeconfig) come back as fx.Error so the app fails before it
// starts anything; Config.Explain words any error of the app for the log. The start order follows the
// dependencies: the engine first (everything needs it), then the admin
// server, then the listener (it takes the admin server as a dependency so
// that /readyz and /metrics answer while it drains), then the hook that
// writes the client's kubeconfig; fx stops them in the reverse order.
func App(c Config, log *slog.Logger) fx.Option {
	// runtimetune.Apply has set the Go memory limit by now.
	c.sizeToMemory(debug.SetMemoryLimit(-1), log)
	// fx logs its events, and a failed start as a second line beside
	// startup.Run's, only at -v 2.
	logger := fx.WithLogger(func() fxevent.Logger {
		if c.Verbosity >= 2 {
			return &fxevent.SlogLogger{Logger: log}
		}
		return fxevent.NopLogger
	})
	if err := checkWriteKubeconfig(c.WriteKubeconfig); err != nil {
		return fx.Options(logger, fx.Error(err))
	}
	ecfg, err := c.engineConfig(log)
	if err != nil {
		return fx.Options(logger, fx.Error(err))
	}
	// startup turns /startupz green once the hook below has run.
	startup := admin.NewStartup()
	lcfg, localCA, err := listenerConfig(&c)
	if err != nil {
		return fx.Options(logger, fx.Error(err))
	}
	return fx.Options(
		logger,
		// Watches end at once on stop; the grace period is for short
		// requests, plus a little for the rest of the teardown.
		fx.StopTimeout(c.Listener.ShutdownGrace+5*time.Second),
		fx.Supply(log, ecfg, c.Admin, startup, lcfg),
		Metrics,
		engine.Module,
		fx.Provide(
			func(e *engine.Engine) admin.State { return e },
			func(e *engine.Engine) admin.ResolverStatus { return e.ResolverStatus() },
			func(e *engine.Engine) admin.Cost { return e.Cost() },
			// The listener serves the engine's handler, and takes the
			// admin server too so that it starts after and stops before it.
			func(e *engine.Engine, _ *admin.Server) listener.Handler { return e.Handler() },
		),
		listener.Module,
		admin.Module,
		fx.Invoke(func(log *slog.Logger, reg prometheus.Registerer) error { return reportInsecure(&c, log, reg) }),
		// The client's first requests wait in the backlog for endpoints
		// rather than get 503 and a 1 s Retry-After.
		fx.Invoke(func(s *listener.Server, e *engine.Engine) { s.AcceptAfter(e.Resolved(), acceptWait) }),
		fx.Invoke(func(lc fx.Lifecycle, s *listener.Server) {
			lc.Append(fx.StartHook(func() error {
				// The listener's start hook has run: it is bound.
				addr := s.Addr().String()
				socket := "own"
				if s.Inherited() {
					socket = "fanout hold"
				}
				if localCA != nil {
					log.Info("proxy listening", "address", addr, "protocols", "HTTP/2 and HTTP/1.1 over TLS, client certificate required", "socket", socket)
				} else {
					log.Info("proxy listening", "address", addr, "protocols", "HTTP/1.1, h2c", "socket", socket)
				}
				if c.WriteKubeconfig == "" {
					startup.Done()
					return nil
				}
				if err := writeClientKubeconfig(c.WriteKubeconfig, addr, localCA); err != nil {
					return fmt.Errorf("--write-kubeconfig %s: %w; pass a path in a directory fanout can write, shared with the client's container", c.WriteKubeconfig, err)
				}
				log.Info("wrote client kubeconfig", "path", c.WriteKubeconfig, "server", clientURL(addr, localCA))
				startup.Done()
				return nil
			}))
		}),
	)
}

// acceptWait bounds how long the listener holds connections back for the
// engine's first endpoints: discovery is one LIST from an apiserver, which
// may be slow or down; after this fanout accepts and answers 503 as
// before.
const acceptWait = 2 * time.Second

// engineConfig is c.Engine with the client's identity (--kubeconfig or
// --in-cluster) read in, and how the endpointslice resolver gets its
// credentials (--discovery-kubeconfig). The values were validated with c.
func (c *Config) engineConfig(log *slog.Logger) (engine.Config, error) {
	up, err := loadUpstream(c)
	if err != nil {
		return engine.Config{}, err
	}
	cfg := c.Engine
	cfg.Upstream = up
	cfg.Discovery = func() (resolver.APIServer, error) { return discoveryAPIServer(c, log) }
	cfg.Log = log
	return cfg, nil
}

// EngineConfig is the engine's Config the sidecar runs for c, for tests
// that compare it with the library's.
func EngineConfig(c Config, log *slog.Logger) (engine.Config, error) { return c.engineConfig(log) }

// discoveryAPIServer returns where and as whom the endpointslice
// resolver reads EndpointSlices (--discovery-kubeconfig): by default the
// client's own kubeconfig, which talks to its server directly rather than
// through fanout. The credentials' files are watched while the resolver
// runs, as the client's are.
func discoveryAPIServer(c *Config, log *slog.Logger) (resolver.APIServer, error) {
	up, err := discoveryUpstream(c)
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
func discoveryUpstream(c *Config) (*certs.Upstream, error) {
	switch c.DiscoveryKubeconfig {
	case DiscoveryInCluster:
		up, err := certs.LoadInCluster(inClusterPaths)
		if err != nil {
			return nil, fmt.Errorf("--discovery-kubeconfig %s: %w", DiscoveryInCluster, err)
		}
		return up, nil
	case "":
		if c.InCluster {
			up, err := certs.LoadInCluster(inClusterPaths)
			if err != nil {
				return nil, fmt.Errorf("--in-cluster for discovery: %w", err)
			}
			return up, nil
		}
		up, err := certs.LoadKubeconfig(c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s for discovery: %w; pass --discovery-kubeconfig", c.Kubeconfig, err)
		}
		return up, nil
	}
	up, err := certs.LoadKubeconfig(c.DiscoveryKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--discovery-kubeconfig %s: %w", c.DiscoveryKubeconfig, err)
	}
	return up, nil
}

// Metrics provides one Prometheus registry as both Registerer and Gatherer,
// with the Go runtime and process collectors and fanout_build_info.
var Metrics = metrics.Module
