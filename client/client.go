package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/resolver"
)

// Balancer is a running fanout inside the program: the sidecar's engine
// (components/engine: resolver, readiness prober, credential watcher,
// connection pools, watch rebalancer, endpoint state log) with its
// balancing RoundTripper in front. Create it with New (or Wrap) and Close
// it when the clients built from Config are done. Its methods are safe for
// concurrent use.
type Balancer struct {
	config *rest.Config
	engine *engine.Engine
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
	ecfg, err := engineConfig(cfg, o)
	if err != nil {
		return nil, err
	}
	e, err := engine.New(ecfg)
	if err != nil {
		if _, ok := errors.AsType[*engine.EndpointsError](err); ok {
			return nil, fmt.Errorf("fanout client: WithEndpoints: %w", err)
		}
		return nil, fmt.Errorf("fanout client: %w", err)
	}
	if err := e.Start(context.Background()); err != nil {
		_ = e.Stop(context.Background())
		return nil, fmt.Errorf("fanout client: %w", err)
	}
	if o.startWait > 0 {
		t := time.NewTimer(o.startWait)
		select {
		case <-e.Resolved():
		case <-t.C:
			ecfg.Log.Warn("fanout client: no endpoint set yet; requests get 503 with Retry-After until the resolver publishes one", "waited", o.startWait)
		}
		t.Stop()
	}
	return &Balancer{config: wrappedConfig(cfg, e.RoundTripper()), engine: e}, nil
}

// engineConfig is the engine's Config for cfg and the options: the
// sidecar's defaults (engine.Defaults, which its flags default to) with
// what the options change.
func engineConfig(cfg *rest.Config, o options) (engine.Config, error) {
	up, err := upstreamFrom(cfg)
	if err != nil {
		return engine.Config{}, err
	}
	discovery := o.discovery
	if discovery == nil {
		discovery = cfg
	}
	c := engine.Defaults()
	c.Upstream = up
	c.Endpoints = o.endpoints
	c.Discovery = func() (resolver.APIServer, error) { return discoveryAPIServer(discovery) }
	c.Balancer.Policy = o.policy
	c.Probe.Interval = o.probeInterval
	c.WatchRebalance = o.watchRebalance
	c.SkewRouting = o.skewRouting
	c.Transport.Client = o.upstreamHTTP2
	c.Balancer.Zone, c.Balancer.ZonePolicy, c.Balancer.ZoneMinEndpoints = o.zone.zone, o.zone.policy, o.zone.min
	c.EndpointZones = o.zone.endpoints
	c.Proxy.EndpointHeader = o.endpointHeader
	c.Log = o.log
	c.Registerer = o.registerer
	if o.tune != nil {
		o.tune(&c)
	}
	// The one check of the settings, as the sidecar's after its flags.
	if err := c.Validate(); err != nil {
		return engine.Config{}, fmt.Errorf("fanout client: %w", err)
	}
	return c, nil
}

// discoveryAPIServer is how the endpointslice:/// resolver reaches the
// apiserver of cfg: client-go's transport for it, so that every kind of
// credential client-go knows (exec plugins, auth providers, rotating
// files) works for discovery too.
func discoveryAPIServer(cfg *rest.Config) (resolver.APIServer, error) {
	cfg = rest.CopyConfig(cfg)
	rest.AddUserAgent(cfg, "fanout-discovery")
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return resolver.APIServer{}, fmt.Errorf("fanout client: discovery config: %w", err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return resolver.APIServer{}, fmt.Errorf("fanout client: discovery transport: %w", err)
	}
	return resolver.APIServer{URL: u.String(), Transport: rt, UserAgent: cfg.UserAgent}, nil
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
func (b *Balancer) RoundTripper() http.RoundTripper { return b.engine.RoundTripper() }

// Endpoints returns the balancer's view of every endpoint, as the
// sidecar's /debug/endpoints serves it.
func (b *Balancer) Endpoints() []balancer.EndpointStatus { return b.engine.Endpoints() }

// Close ends open watches cleanly (client-go sees the stream end), stops
// the resolver, the prober, the watch rebalancer and the credential
// watcher, closes every connection and unregisters the metrics. Short
// requests still in flight fail, and requests made afterwards fail with
// proxy.ErrStopped: stop the clients (informers, manager) first. Close is
// idempotent and returns nil.
func (b *Balancer) Close() error {
	_ = b.engine.Stop(context.Background()) // cannot time out without a deadline
	return nil
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
