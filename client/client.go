package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/resolver"
)

// Balancer is a running fanout inside the program: resolver, readiness
// prober, credential watcher and connection pools, with the balancing
// RoundTripper in front of them. Create it with New (or Wrap) and Close it
// when the clients built from Config are done. Its methods are safe for
// concurrent use.
type Balancer struct {
	config     *rest.Config
	handler    *proxy.Handler
	balancer   *balancer.Balancer
	transports *transport.Transports
	// probes is the prober's own pool set, as in the sidecar: probes must
	// not share fate with client traffic (a connection at its stream
	// limit or starved by unread responses, one being torn down by a
	// GOAWAY). nil when probing is off.
	probes  *transport.Transports
	prober  *health.Prober // nil when probing is off
	creds   *certs.Credentials
	metrics *tracking
	log     *slog.Logger

	cancel    context.CancelFunc
	resolving sync.WaitGroup
	closeOnce sync.Once
}

// Wrap is New for callers that need only the config and a way to stop:
//
//	cfg, closer, err := client.Wrap(cfg)
//	defer closer.Close()
func Wrap(cfg *rest.Config, opts ...Option) (*rest.Config, io.Closer, error) {
	b, err := New(cfg, opts...)
	if err != nil {
		return nil, nil, err
	}
	return b.Config(), b, nil
}

// New starts fanout for cfg and returns once the resolver published its
// first endpoint set (or WithStartWait expired).
//
// From cfg it takes the apiserver's URL (Host, https only), the CA
// (CAData, else CAFile; none means the system roots), the name verified in
// every endpoint's certificate (TLSClientConfig.ServerName, else Host's
// host name), the client certificate and key (data, else files) and the
// bearer token (BearerTokenFile, else BearerToken). Files are watched and
// re-read when they change, as in the sidecar. Configs fanout cannot honour
// are refused with an error that says why: exec plugins, auth providers,
// basic auth, insecure TLS, a proxy, a custom
// dialer, or a Transport of their own.
//
// Everything else (QPS, Burst, Timeout, UserAgent, impersonation,
// WrapTransport, content types) is kept in Config: client-go applies
// those above fanout's RoundTripper.
func New(cfg *rest.Config, opts ...Option) (*Balancer, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	up, err := upstreamFrom(cfg)
	if err != nil {
		return nil, err
	}
	if err := (balancer.Config{Policy: o.policy}).Validate(); err != nil {
		return nil, fmt.Errorf("fanout client: %w", err)
	}
	if o.probeInterval < 0 {
		return nil, fmt.Errorf("fanout client: WithProbeInterval must not be negative, got %s; use 0 to disable probing", o.probeInterval)
	}

	b := &Balancer{log: o.log, metrics: &tracking{reg: o.registerer}}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()

	var certMetrics *certs.Metrics
	if o.registerer != nil {
		certMetrics = certs.NewMetrics()
		if err := b.metrics.Register(certMetrics); err != nil {
			return nil, fmt.Errorf("fanout client: registering metrics: %w", err)
		}
	}
	b.creds, err = certs.NewCredentialsWithOptions(up, certs.Options{Log: o.log, Metrics: certMetrics})
	if err != nil {
		return nil, fmt.Errorf("fanout client: %w", err)
	}
	if err := b.creds.Start(); err != nil {
		return nil, fmt.Errorf("fanout client: watching credential files: %w", err)
	}

	resolverMetrics := resolver.NewMetrics()
	discovery := o.discovery
	if discovery == nil {
		discovery = cfg
	}
	res, err := resolver.Parse(o.endpoints, resolver.Config{
		Fallback:  up.Server,
		Discovery: func() (*rest.Config, error) { return rest.CopyConfig(discovery), nil },
		Log:       o.log,
		Metrics:   resolverMetrics,
	})
	if err != nil {
		return nil, fmt.Errorf("fanout client: WithEndpoints: %w", err)
	}

	b.transports, err = transport.New(transport.Config{ServerName: up.ServerName}, b.creds)
	if err != nil {
		return nil, fmt.Errorf("fanout client: %w", err)
	}
	b.balancer, err = balancer.New(balancerConfig(o))
	if err != nil {
		return nil, fmt.Errorf("fanout client: %w", err)
	}
	proxyMetrics, err := proxy.NewMetrics(b.metrics.orNil())
	if err != nil {
		return nil, fmt.Errorf("fanout client: registering metrics: %w", err)
	}
	pcfg := proxyConfig()
	pcfg.Log = o.log
	b.handler = proxy.New(pcfg, b.balancer, b.transports, proxyMetrics)

	collectors := append([]prometheus.Collector{b.balancer.Collector(), resolverMetrics}, b.transports.Collectors()...)
	sinks := []endpointSink{b.balancer}
	if o.probeInterval > 0 {
		b.probes, err = transport.New(transport.Config{ServerName: up.ServerName}, b.creds)
		if err != nil {
			return nil, fmt.Errorf("fanout client: %w", err)
		}
		b.prober, err = health.New(proberConfig(o), b.probes, health.WithResolveOnFailure(b.balancer, res), o.log)
		if err != nil {
			return nil, fmt.Errorf("fanout client: %w", err)
		}
		collectors = append(collectors, b.prober.Collectors()...)
		sinks = append(sinks, b.prober)
		_ = b.prober.Start() // never fails; probes start with the first snapshot
	}
	sinks = append(sinks, resolverMetrics)
	if o.registerer != nil {
		for _, c := range collectors {
			if err := b.metrics.Register(c); err != nil {
				return nil, fmt.Errorf("fanout client: registering metrics: %w", err)
			}
		}
	}

	first := b.runResolver(res, sinks)
	if o.startWait > 0 {
		t := time.NewTimer(o.startWait)
		select {
		case <-first:
		case <-t.C:
			o.log.Warn("fanout client: no endpoint set yet; requests get 503 with Retry-After until the resolver publishes one", "waited", o.startWait)
		}
		t.Stop()
	}

	b.config = wrappedConfig(cfg, b.handler.RoundTripper())
	ok = true
	return b, nil
}

// Config returns a copy of the wrapped config: cfg with Transport set to
// fanout's RoundTripper and the TLS material and bearer token removed
// (fanout's connections present them; client-go refuses a Transport next
// to TLS options). Host stays as given; the RoundTripper sends every
// request to the endpoint it picks, whatever the URL says.
func (b *Balancer) Config() *rest.Config { return rest.CopyConfig(b.config) }

// RoundTripper returns the balancing RoundTripper, for HTTP clients built
// without rest.Config. Requests must carry a path kube-apiserver serves;
// their URL host is ignored.
func (b *Balancer) RoundTripper() http.RoundTripper { return b.handler.RoundTripper() }

// Endpoints returns the balancer's view of every endpoint, as the
// sidecar's /debug/endpoints serves it.
func (b *Balancer) Endpoints() []balancer.EndpointStatus { return b.balancer.Endpoints() }

// Close ends open watches cleanly (client-go sees the stream end), stops
// the resolver, the prober and the credential watcher, closes every
// connection and unregisters the metrics. Short requests still in flight
// fail, and requests made afterwards fail with proxy.ErrStopped: stop the
// clients (informers, manager) first. Close is idempotent and returns nil.
func (b *Balancer) Close() error {
	b.closeOnce.Do(func() {
		if b.handler != nil {
			b.handler.StopLongRunning()
		}
		if b.cancel != nil {
			b.cancel()
		}
		b.resolving.Wait()
		if b.prober != nil {
			_ = b.prober.Stop()
		}
		if b.creds != nil {
			b.creds.Stop()
		}
		if b.transports != nil {
			b.transports.Close()
		}
		if b.probes != nil {
			b.probes.Close()
		}
		b.metrics.unregisterAll()
	})
	return nil
}

// balancerConfig is the sidecar's default balancer configuration
// (balancer.Recommended: outlier ejection capped at a third of the
// endpoints, 5 consecutive failures, 10 s slow start) with the chosen
// policy.
func balancerConfig(o options) balancer.Config { return balancer.Recommended(o.policy) }

// proxyConfig sets the retry budget the sidecar's flags default to. The
// values are spelled out, not left to proxy.Config's zero value, so that
// TestFlagDefaultsAreTheLibrarys compares what each side passes.
func proxyConfig() proxy.Config {
	b := proxy.DefaultRetryBudget()
	return proxy.Config{RetryBudget: &b}
}

// proberConfig sets the probe rise and fall the sidecar's flags default
// to, spelled out for the same reason.
func proberConfig(o options) health.Config {
	return health.Config{Interval: o.probeInterval, Rise: health.DefaultRise, Fall: health.DefaultFall}
}

// endpointSink receives resolver snapshots (components.RunResolver's
// contract).
type endpointSink interface {
	Update([]resolver.Endpoint)
}

// runResolver feeds snapshots to the sinks in order, then lets the
// transports drop pools of removed endpoints: the same order as the
// sidecar's components.RunResolver (balancer before prober, transports
// last, after the prober stopped probing removed endpoints). The returned
// channel closes after the first snapshot.
func (b *Balancer) runResolver(r resolver.Resolver, sinks []endpointSink) <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	first := make(chan struct{})
	var once sync.Once
	b.resolving.Add(1)
	go func() {
		defer b.resolving.Done()
		err := r.Run(ctx, func(eps []resolver.Endpoint) {
			addrs := make([]string, len(eps))
			for i, ep := range eps {
				addrs[i] = ep.Address
			}
			b.log.Info("fanout client: endpoints updated", "endpoints", addrs)
			for _, s := range sinks {
				s.Update(eps)
			}
			b.transports.Retain(addrs)
			if b.probes != nil {
				b.probes.Retain(addrs)
			}
			once.Do(func() { close(first) })
		})
		if err != nil && ctx.Err() == nil {
			b.log.Error("fanout client: endpoint resolver stopped; keeping the last known endpoints", "error", err)
		}
	}()
	return first
}

// upstreamFrom reads what fanout needs from cfg, refusing what it cannot
// honour.
func upstreamFrom(cfg *rest.Config) (*certs.Upstream, error) {
	if cfg == nil {
		return nil, errors.New("fanout client: nil rest.Config")
	}
	const creds = "give the rest.Config a client certificate/key or a bearer token (file)"
	switch {
	case cfg.ExecProvider != nil:
		return nil, fmt.Errorf("fanout client: exec credential plugins are not supported: %s", creds)
	case cfg.AuthProvider != nil:
		return nil, fmt.Errorf("fanout client: auth provider %q is not supported: %s", cfg.AuthProvider.Name, creds)
	case cfg.Username != "" || cfg.Password != "":
		return nil, fmt.Errorf("fanout client: basic authentication is not supported (kube-apiserver dropped it): %s", creds)
	case cfg.Insecure:
		return nil, errors.New("fanout client: Insecure (skip TLS verification) is not supported: set TLSClientConfig.CAData or CAFile")
	case cfg.Transport != nil:
		return nil, errors.New("fanout client: the rest.Config already has a Transport; fanout must be the transport (use WrapTransport for middleware)")
	case cfg.Proxy != nil:
		return nil, errors.New("fanout client: Proxy is not supported: fanout dials kube-apiserver endpoints directly")
	case cfg.Dial != nil:
		return nil, errors.New("fanout client: a custom Dial is not supported: fanout dials kube-apiserver endpoints itself")
	}
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("fanout client: Host %q is not https://HOST[:PORT]: fanout only talks TLS to kube-apiserver, without a path prefix", cfg.Host)
	}
	tc := cfg.TLSClientConfig
	up := &certs.Upstream{
		Server:     &url.URL{Scheme: "https", Host: u.Host},
		ServerName: tc.ServerName,
		// Data wins over a file, as in client-go.
		CA:         source(tc.CAData, tc.CAFile),
		ClientCert: source(tc.CertData, tc.CertFile),
		ClientKey:  source(tc.KeyData, tc.KeyFile),
	}
	if up.ServerName == "" {
		up.ServerName = u.Hostname()
	}
	// A token file wins over the token, as in client-go (which reads the
	// file into BearerToken and keeps re-reading it).
	switch {
	case cfg.BearerTokenFile != "":
		up.Token = certs.Source{Path: cfg.BearerTokenFile}
	case cfg.BearerToken != "":
		up.Token = certs.Source{Data: []byte(cfg.BearerToken)}
	}
	switch {
	case up.ClientCert.IsSet() != up.ClientKey.IsSet():
		return nil, errors.New("fanout client: the rest.Config has a client certificate without a key or a key without a certificate: set both")
	case !up.ClientCert.IsSet() && !up.Token.IsSet():
		return nil, fmt.Errorf("fanout client: the rest.Config carries no credentials, so fanout would reach kube-apiserver anonymously: %s", creds)
	}
	return up, nil
}

func source(data []byte, path string) certs.Source {
	if len(data) > 0 {
		return certs.Source{Data: data}
	}
	return certs.Source{Path: path}
}

// wrappedConfig is cfg with fanout as its transport.
func wrappedConfig(cfg *rest.Config, rt http.RoundTripper) *rest.Config {
	out := rest.CopyConfig(cfg)
	// fanout's connections present the certificate and the token; client-go
	// refuses TLS options next to a Transport, and a token it added itself
	// would make fanout pass the request through without the certificate.
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.BearerToken, out.BearerTokenFile = "", ""
	out.Transport = rt
	return out
}

// tracking registers collectors on the caller's registerer and remembers
// them, so that Close can unregister them.
type tracking struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

func (t *tracking) orNil() prometheus.Registerer {
	if t.reg == nil {
		return nil
	}
	return t
}

func (t *tracking) Register(c prometheus.Collector) error {
	if err := t.reg.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.cs = append(t.cs, c)
	t.mu.Unlock()
	return nil
}

func (t *tracking) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *tracking) Unregister(c prometheus.Collector) bool { return t.reg.Unregister(c) }

func (t *tracking) unregisterAll() {
	if t.reg == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cs {
		t.reg.Unregister(c)
	}
	t.cs = nil
}
