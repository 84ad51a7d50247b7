// Package engine is fanout's runtime, built the same way for the sidecar
// (package sidecar: flags → Config, one fx provide) and for the library
// (package client: rest.Config → Config): the credentials and their file
// watcher, the resolver loop, the balancer, the client and probe transports,
// the readiness prober, the proxy handler, the watch rebalancer and the
// endpoint state log. Neither caller wires these parts by hand; they differ
// only in the Config they build and in what they put around the engine (the
// sidecar a listener, an admin server and a kubeconfig for its client; the
// library a rest.Config). See docs/architecture.md.
//
// A request enters Handler (or RoundTripper), which asks the balancer for an
// endpoint and sends the request through the transport's pool for it,
// authenticated with the credentials. Endpoint snapshots go the other way:
// the resolver loop feeds each one to the balancer, the prober, the resolver
// metrics and then the transports, which drop the pools of endpoints that
// went away. The prober probes over pools of its own and reports readiness
// to the balancer; the watch rebalancer reads the balancer's loads and ends
// watches in the handler.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/apis"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/components/watch"
	"github.com/fanout-dev/fanout/resolver"
)

// Config is everything the engine runs with. Start from Defaults: the zero
// value turns probing and watch rebalancing off.
type Config struct {
	// Upstream is the client's identity toward kube-apiserver: the server
	// (the fallback endpoint), the CA, the client key pair and the token.
	// Its files are watched and re-read. Required.
	Upstream *certs.Upstream
	// Endpoints is where the apiservers are, in the --endpoints grammar
	// (resolver.Parse); "" is Upstream.Server alone.
	Endpoints string
	// Discovery returns where and with what credentials the
	// endpointslice:/// resolver reads EndpointSlices; only called for
	// that scheme.
	Discovery func() (resolver.APIServer, error)
	// EndpointZones gives endpoints their zones where the resolver knows
	// none (static lists, DNS), in resolver.ParseZones' grammar
	// (--endpoint-zones); Balancer.Zone and ZonePolicy use them.
	EndpointZones string

	// Transport configures the connection pools of requests and probes.
	// An empty ServerName means Upstream.ServerName.
	Transport transport.Config
	// Balancer configures the balancer (balancer.Recommended by default).
	Balancer balancer.Config
	// Proxy configures the handler: the retry budget and the replay
	// buffer.
	Proxy proxy.Config
	// Probe configures the /readyz prober. Unlike in health.Config, an
	// Interval of 0 turns probing off (--probe-interval 0).
	Probe health.Config
	// WatchRebalance turns on the watch rebalancer (--watch-rebalance),
	// configured by Rebalance.
	WatchRebalance bool
	Rebalance      watch.RebalanceConfig
	// Cost configures the table of who costs what (components/cost): its
	// size (0 turns it off) and how many keys go to Prometheus.
	Cost cost.Config
	// SkewRouting reads each endpoint's discovery and /version
	// (components/apis, configured by APIs) and, while the endpoints serve
	// different APIs, sends a resource request only to those that serve
	// it; a 404 "no such path" goes once to one that does
	// (--skew-routing).
	SkewRouting bool
	APIs        apis.Config

	// Log receives the engine's lines (endpoint changes, ejections,
	// readiness, credential reloads); nil discards them.
	Log *slog.Logger
	// Registerer takes the fanout_* metrics, which Stop unregisters; nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// Defaults returns the sidecar's defaults, which are the library's: the
// least-request policy with balancer.Recommended's outlier detection and
// slow start, proxy.DefaultRetryBudget, /readyz probes every
// health.DefaultInterval with health.DefaultRise and DefaultFall, and watch
// rebalancing at watch.DefaultRebalanceRate and DefaultRebalanceTolerance.
// The library starts from it; the sidecar's flags default to the same
// values (client TestSidecarAndLibraryRunTheSameEngine checks both).
func Defaults() Config {
	budget := proxy.DefaultRetryBudget()
	return Config{
		Balancer:       balancer.Recommended(balancer.PolicyLeastRequest),
		Proxy:          proxy.Config{RetryBudget: &budget},
		Probe:          health.Config{Interval: health.DefaultInterval, Rise: health.DefaultRise, Fall: health.DefaultFall},
		WatchRebalance: true,
		Rebalance:      watch.RebalanceConfig{Rate: watch.DefaultRebalanceRate, Tolerance: watch.DefaultRebalanceTolerance, Freshness: true},
		Cost:           cost.Config{Size: cost.DefaultSize, MetricsTop: cost.DefaultMetricsTop},
		SkewRouting:    true,
		APIs:           apis.Config{Interval: apis.DefaultInterval},
		Transport:      transport.Config{Client: transport.ClientOwn},
	}
}

// Validate reports every setting that cannot work. It is the one check of
// the engine's settings: the sidecar calls it (through its Config) once the
// flags are parsed, the library once its options are applied; New and the
// parts' constructors trust a Config that passed it. Upstream and
// Discovery are not settings but the identity read from files, which New
// requires.
func (c Config) Validate() error {
	var errs []error
	if err := c.Balancer.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := resolver.ParseZones(c.EndpointZones); err != nil {
		errs = append(errs, err)
	}
	if err := c.Proxy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Cost.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.APIs.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Transport.Client.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Probe.Interval < 0 {
		errs = append(errs, fmt.Errorf("--probe-interval must not be negative, got %s; use 0 to turn probing off", c.Probe.Interval))
	} else if err := c.Probe.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.WatchRebalance {
		if c.Rebalance.Rate <= 0 {
			errs = append(errs, fmt.Errorf("--watch-rebalance-rate must be above 0, got %v; to turn rebalancing off, use --watch-rebalance=false (Config.WatchRebalance)", c.Rebalance.Rate))
		} else if err := c.Rebalance.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// EndpointsError is New's error for Config.Endpoints, so that each
// caller can name it in its own terms (--endpoints, WithEndpoints).
type EndpointsError struct{ Err error }

func (e *EndpointsError) Error() string { return e.Err.Error() }
func (e *EndpointsError) Unwrap() error { return e.Err }

// CredentialsError is New's error for the files of Config.Upstream (the
// CA, client certificate and key, tokenFile), so that each caller can say
// where they were named (--kubeconfig, --in-cluster, a rest.Config).
type CredentialsError struct{ Err error }

func (e *CredentialsError) Error() string { return e.Err.Error() }
func (e *CredentialsError) Unwrap() error { return e.Err }

// Part names, as Parts reports them.
const (
	PartCredentials     = "credentials"
	PartResolver        = "resolver"
	PartBalancer        = "balancer"
	PartTransports      = "transports"
	PartProxy           = "proxy"
	PartProbeTransports = "probe-transports"
	PartProber          = "prober"
	PartWatchRebalancer = "watch-rebalancer"
	PartDiscoverer      = "discoverer"
	PartStateLog        = "state-log"
)

// Engine is a built runtime. New builds it, Start runs its loops, Stop
// ends them and closes every connection; an Engine is not restarted. Its
// methods are safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger

	creds      *certs.Credentials
	resolver   resolver.Resolver
	zones      resolver.Zones
	resolved   *resolver.Metrics
	balancer   *balancer.Balancer
	transports *transport.Transports
	handler    *proxy.Handler
	// proxyMetrics are the handler's, which follow the endpoint set.
	proxyMetrics *proxy.Metrics
	// probes is the prober's own pool set: probes must not share fate with
	// client traffic (a connection full of watches at its stream limit, a
	// pool whose connection is being torn down by a GOAWAY), and a probe
	// answer must be about the apiserver, not about the client's load on
	// it. Its metrics are not registered: fanout_upstream_* describe client
	// traffic. nil, as prober, when probing is off.
	probes     *transport.Transports
	prober     *health.Prober
	discoverer *apis.Discoverer  // nil when skew routing is off
	rebalancer *watch.Rebalancer // nil when rebalancing is off
	cost       *cost.Table       // nil when the table is off
	metrics    *tracking

	// first closes after the resolver's first snapshot reached every part.
	first     chan struct{}
	firstOnce sync.Once

	mu      sync.Mutex
	started bool
	running []string // the loops Start runs, by part name
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	stopped chan struct{} // closed when Stop finished
	stop    sync.Once
}

// New builds every part from cfg, which passed Validate, and registers
// their metrics; it starts nothing and dials nothing. On error nothing
// stays registered.
func New(cfg Config) (*Engine, error) {
	if cfg.Upstream == nil || cfg.Upstream.Server == nil {
		return nil, errors.New("engine: Config.Upstream (the apiserver and the client's credentials) is required")
	}
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg: cfg, log: cfg.Log, metrics: &tracking{reg: cfg.Registerer},
		first: make(chan struct{}), stopped: make(chan struct{}),
	}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	if err := e.build(); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

func (c Config) withDefaults() Config {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Transport.ServerName == "" {
		c.Transport.ServerName = c.Upstream.ServerName
	}
	if c.Proxy.Log == nil {
		c.Proxy.Log = c.Log
	}
	return c
}

func (e *Engine) build() error {
	cfg := e.cfg
	var certMetrics *certs.Metrics
	if cfg.Registerer != nil {
		certMetrics = certs.NewMetrics()
		if err := e.metrics.Register(certMetrics); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	var err error
	e.creds, err = certs.NewCredentialsWithOptions(cfg.Upstream, certs.Options{Log: e.log, Metrics: certMetrics})
	if err != nil {
		return &CredentialsError{Err: err}
	}

	e.resolved = resolver.NewMetrics()
	e.resolver, err = resolver.Parse(cfg.Endpoints, resolver.Config{
		Fallback:  cfg.Upstream.Server,
		Discovery: cfg.Discovery,
		Log:       e.log,
		Metrics:   e.resolved,
	})
	if err != nil {
		return &EndpointsError{Err: err}
	}
	if e.zones, err = resolver.ParseZones(cfg.EndpointZones); err != nil {
		return err
	}

	e.transports, err = transport.New(cfg.Transport, e.creds)
	if err != nil {
		return err
	}
	e.balancer, err = balancer.New(cfg.Balancer)
	if err != nil {
		return err
	}
	proxyMetrics, err := proxy.NewMetrics(e.metrics.orNil())
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	e.proxyMetrics = proxyMetrics
	// The transports dial upgrades (exec, attach, port-forward) too, unless
	// the Config names a dialer of its own.
	proxyCfg := cfg.Proxy
	if proxyCfg.AnswerBudget == nil {
		// Short answers' copy buffers and upstream stream windows are
		// both what an unread answer holds: one budget bounds them.
		proxyCfg.AnswerBudget = e.transports.WindowBudget()
	}
	if proxyCfg.Upgrades == nil {
		proxyCfg.Upgrades = e.transports
	}

	collectors := append([]prometheus.Collector{e.balancer.Collector(), e.resolved}, e.transports.Collectors()...)
	if cfg.Probe.Interval > 0 || cfg.SkewRouting {
		// Discovery reads ride the probes' pools: background requests,
		// apart from client traffic.
		// They share the requests' answer window budget.
		probeCfg := cfg.Transport
		probeCfg.WindowBudget = e.transports.WindowBudget()
		e.probes, err = transport.New(probeCfg, e.creds)
		if err != nil {
			return err
		}
	}
	if cfg.SkewRouting {
		e.discoverer, err = apis.New(cfg.APIs, e.probes, e.balancer, e.log)
		if err != nil {
			return err
		}
		collectors = append(collectors, e.discoverer.Collectors()...)
		proxyCfg.Discovery = e.discoverer
	}
	if cfg.Probe.Interval > 0 {
		var sink health.Sink = health.WithResolveOnFailure(e.balancer, e.resolver)
		if e.discoverer != nil {
			// A restarted apiserver may be another release.
			sink = e.discoverer.RefreshOnReady(sink)
		}
		e.prober, err = health.New(cfg.Probe, e.probes, sink, e.log)
		if err != nil {
			return err
		}
		collectors = append(collectors, e.prober.Collectors()...)
	}
	if cfg.WatchRebalance {
		if cfg.SkewRouting {
			cfg.Rebalance.Serves = e.balancer.Serves
		}
		e.rebalancer, err = watch.NewRebalancer(cfg.Rebalance, e.balancer, e.metrics.orNil())
		if err != nil {
			return fmt.Errorf("watch rebalancer: %w", err)
		}
		proxyCfg.Rebalancer = e.rebalancer
	}
	e.cost, err = cost.New(cfg.Cost)
	if err != nil {
		return err
	}
	if e.cost != nil {
		proxyCfg.Cost = e.cost
	}
	// Registered with the table off too: its size and evictions are 0.
	collectors = append(collectors, cost.NewCollector(e.cost, cfg.Cost.MetricsTop))
	// The handler comes last: it takes the rebalancer, if any, as a
	// dependency.
	e.handler = proxy.New(proxyCfg, e.balancer, e.transports, proxyMetrics)
	if cfg.Registerer != nil {
		for _, c := range collectors {
			if err := e.metrics.Register(c); err != nil {
				return fmt.Errorf("registering metrics: %w", err)
			}
		}
	}
	return nil
}

// Config returns the configuration the engine runs with, defaults filled
// in.
func (e *Engine) Config() Config { return e.cfg }

// Parts names the parts the engine built and, once started, the loops
// Start runs (the resolver loop, then the state log), in start order. The
// sidecar and the library built from one Config report the same parts.
func (e *Engine) Parts() []string {
	parts := []string{PartCredentials, PartBalancer, PartTransports, PartProxy}
	if e.probes != nil {
		parts = append(parts, PartProbeTransports)
	}
	if e.prober != nil {
		parts = append(parts, PartProber)
	}
	if e.discoverer != nil {
		parts = append(parts, PartDiscoverer)
	}
	if e.rebalancer != nil {
		parts = append(parts, PartWatchRebalancer)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return append(parts, e.running...)
}

// run starts loop on a goroutine of its own until Stop, under name.
// e.mu is held.
func (e *Engine) run(ctx context.Context, name string, loop func(context.Context)) {
	e.running = append(e.running, name)
	e.loops.Go(func() { loop(ctx) })
}

// Start watches the credential files and starts the prober, the watch
// rebalancer, the resolver loop and the state log. It does not wait for
// endpoints (see Resolved); requests made before the first snapshot get
// 503 with Retry-After. ctx is not retained.
func (e *Engine) Start(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stopped:
		return errors.New("engine: Start after Stop; build a new engine with New")
	default:
	}
	if e.started {
		return errors.New("engine: already started")
	}
	if err := e.creds.Start(); err != nil {
		return fmt.Errorf("watching credential files: %w", err)
	}
	e.started = true
	if e.prober != nil {
		_ = e.prober.Start() // never fails; probes start with the first snapshot
	}
	if e.discoverer != nil {
		e.discoverer.Start() // reads start with the first snapshot
	}
	if e.rebalancer != nil {
		e.rebalancer.Start()
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.run(ctx, PartResolver, e.runResolver)
	e.run(ctx, PartStateLog, func(ctx context.Context) { logEndpointStates(ctx, e.balancer, e.log, stateLogInterval) })
	return nil
}

// Stop ends open watches cleanly (their clients see the stream end and
// re-watch), stops the loops, the prober, the rebalancer and the credential
// watcher, closes every connection and unregisters the metrics. Short
// requests still in flight fail, and later requests get 503 (Handler) or
// proxy.ErrStopped (RoundTripper): the sidecar drains its listener first.
// Stop is idempotent; it returns ctx's error if ctx ends first, and the
// teardown then finishes in the background.
func (e *Engine) Stop(ctx context.Context) error {
	e.stop.Do(func() {
		go func() {
			defer close(e.stopped)
			e.close()
		}()
	})
	select {
	case <-e.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("engine: stopping: %w", ctx.Err())
	}
}

// close tears down whatever was built, in the reverse order of Start.
func (e *Engine) close() {
	if e.handler != nil {
		e.handler.StopLongRunning()
	}
	e.mu.Lock()
	cancel := e.cancel
	e.started = false
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	e.loops.Wait()
	if e.rebalancer != nil {
		e.rebalancer.Stop()
	}
	if e.prober != nil {
		_ = e.prober.Stop()
	}
	if e.discoverer != nil {
		e.discoverer.Stop()
	}
	if e.creds != nil {
		e.creds.Stop()
	}
	if e.transports != nil {
		e.transports.Close()
	}
	if e.probes != nil {
		e.probes.Close()
	}
	e.metrics.unregisterAll()
}

// Handler is the request path: pick, send, retry, watch handling. It is an
// http.Handler for a listener of the caller's own, and a listener.Handler
// for components/listener, which serves it with the sidecar's limits; stop
// that listener before the engine so that short requests drain.
func (e *Engine) Handler() *proxy.Handler { return e.handler }

// RoundTripper is the request path as an http.RoundTripper, for programs
// that link fanout (package client); see proxy.Handler.RoundTripper.
func (e *Engine) RoundTripper() http.RoundTripper { return e.handler.RoundTripper() }

// Endpoints returns the balancer's view of every endpoint, as
// /debug/endpoints serves it.
func (e *Engine) Endpoints() []balancer.EndpointStatus { return e.balancer.Endpoints() }

// Cost returns the table of who costs what, nil when it is off
// (Config.Cost.Size 0); a nil table's Snapshot reports it off.
func (e *Engine) Cost() *cost.Table { return e.cost }

// Ready reports whether at least one endpoint is usable (/readyz).
func (e *Engine) Ready() bool { return e.balancer.Ready() }

// ResolverStatus reports on endpoint discovery, for /readyz.
func (e *Engine) ResolverStatus() *resolver.Metrics { return e.resolved }

// Resolved is closed once the resolver's first endpoint snapshot reached
// the balancer, the prober and the transports.
func (e *Engine) Resolved() <-chan struct{} { return e.first }
