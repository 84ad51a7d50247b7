package sidecar

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy"
)

// Config is the sidecar's one configuration. The command-line flags write
// straight into it (AddFlags), so a flag's default is the value the
// engine, the listener and the admin server are built with:
// engine.Defaults(), which the library (package client) starts from too,
// listener.Defaults() and the admin server's defaults. Validate checks it
// once, after the flags are parsed; nothing downstream checks a value
// again. The flag names are fanout's public interface: keep them.
type Config struct {
	// Kubeconfig is the client's original kubeconfig (--kubeconfig); its
	// identity becomes Engine.Upstream when the app is built.
	Kubeconfig string
	// InCluster uses the pod's ServiceAccount token and CA instead of
	// Kubeconfig (--in-cluster).
	InCluster bool
	// DiscoveryKubeconfig is "", a path, or DiscoveryInCluster: whom the
	// endpointslice resolver reads EndpointSlices as.
	DiscoveryKubeconfig string
	// AllowSharedLoopback permits plaintext on loopback in a network
	// namespace shared with the node (netns.go).
	AllowSharedLoopback bool
	// WriteKubeconfig is where the client's kubeconfig is written once the
	// listener is bound.
	WriteKubeconfig string
	// ListenTLS serves TLS with a per-pod CA and requires its client
	// certificate, both written into WriteKubeconfig.
	ListenTLS bool
	LogFormat string
	Verbosity int

	// Engine is the runtime's configuration: --endpoints,
	// --tls-server-name, --balancer, outlier detection, slow start, the
	// retry budget, probes and watch rebalancing. Upstream, Discovery,
	// Log and Registerer are filled in by App.
	Engine engine.Config
	// Listener is the loopback server's: --listen-address,
	// --allow-remote (AllowAnyHost), the limits, the timeouts and
	// --shutdown-grace. TLS is filled in by App for --listen-tls.
	Listener listener.Config
	// Admin is the admin server's: --admin-address, --enable-pprof.
	Admin admin.Config
}

// DiscoveryInCluster is the --discovery-kubeconfig value that selects the
// pod's service account.
const DiscoveryInCluster = "in-cluster"

// NewConfig returns the defaults, which are the flags' defaults.
func NewConfig() *Config {
	c := &Config{
		LogFormat: "text",
		Engine:    engine.Defaults(),
		Listener:  listener.Defaults(),
		Admin:     admin.Config{ListenAddress: ":7081"},
	}
	// auto: App sizes them to the memory limit (memory.go).
	c.Listener.MaxConnections, c.Engine.Proxy.ReplayBudget = 0, 0
	return c
}

// AddFlags registers the flags on fs, each writing into its field of c.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	if c.Engine.Proxy.RetryBudget == nil {
		b := proxy.DefaultRetryBudget()
		c.Engine.Proxy.RetryBudget = &b
	}
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig,
		"The client's original kubeconfig (required). fanout uses its current context's server, CA, client certificate/key and token or tokenFile. Exec and auth-provider plugins are not supported.")
	fs.BoolVar(&c.InCluster, "in-cluster", c.InCluster,
		"Instead of --kubeconfig, use the pod's service account, as in-cluster clients do: the token and ca.crt under /var/run/secrets/kubernetes.io/serviceaccount (the token is re-read when the kubelet rotates it) and https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.")
	fs.StringVar(&c.Engine.Endpoints, "endpoints", c.Engine.Endpoints,
		"kube-apiserver endpoints: a comma-separated list of https://host:port; dns:///name:port (A/AAAA records, looked up every 5s); "+
			"or endpointslice:///namespace/service[:port-name] (the Service's EndpointSlices, watched; e.g. endpointslice:///default/kubernetes; "+
			"terminating endpoints get no new requests); endpointslice:///namespace/* takes the Service the kubeconfig's server names "+
			"(https://service resolved in namespace, or https://service.namespace[.svc[.domain]]), as a hosted control plane's clients reach their kube-apiserver, "+
			"and the kubeconfig's server alone if it names none (docs/hosted-control-planes.md). Discovery failures keep the last known endpoints, and until discovery first succeeds fanout uses the kubeconfig's server. "+
			"Default: the kubeconfig's server alone.")
	fs.StringVar(&c.DiscoveryKubeconfig, "discovery-kubeconfig", c.DiscoveryKubeconfig,
		"Credentials for --endpoints endpointslice:///...: empty uses --kubeconfig (its server, directly); a path uses that kubeconfig, read as --kubeconfig is (no exec or auth-provider plugins); "+
			"\"in-cluster\" uses the pod's service account. They need get, list and watch on discovery.k8s.io endpointslices in the namespace (see manifests/rbac).")
	fs.StringVar(&c.Engine.Transport.ServerName, "tls-server-name", c.Engine.Transport.ServerName,
		"Server name verified on every endpoint's certificate. Default: the kubeconfig's tls-server-name, else the host of its server URL.")
	fs.StringVar(&c.Listener.ListenAddress, "listen-address", c.Listener.ListenAddress,
		"Plaintext HTTP/1.1 and h2c (prior knowledge) listener for the client (TLS with --listen-tls). Must be a loopback address unless --allow-remote is set, because fanout adds the client's credentials to every request. "+
			"Requests must be addressed to it by loopback name or address (Host localhost, 127.0.0.0/8 or ::1, any port), against DNS rebinding; others get 403.")
	fs.StringVar(&c.Listener.ListenFrom, "listen-from", c.Listener.ListenFrom,
		"Directory shared with a `fanout hold` sidecar (an emptyDir): take the listening socket it holds for --listen-address instead of opening one, so that while fanout restarts "+
			"the client's connection attempts wait in the kernel's backlog instead of being refused. Without an answer within 2s fanout listens itself and says so (fanout_listener_inherited 0).")
	fs.BoolVar(&c.Listener.AllowAnyHost, "allow-remote", c.Listener.AllowAnyHost,
		"Allow a non-loopback --listen-address, and requests addressed to any Host. Anyone who reaches it acts with the client's identity.")
	fs.BoolVar(&c.AllowSharedLoopback, "allow-shared-loopback", c.AllowSharedLoopback,
		"Allow a plaintext listener when fanout runs in a network namespace shared with the node (hostNetwork, static pods, a process on a host), "+
			"which fanout recognises by a hardware network device or a bridge in /sys/class/net. Every process there can then act as the client: prefer --listen-tls.")
	fs.StringVar(&c.Admin.ListenAddress, "admin-address", c.Admin.ListenAddress,
		"Admin listener for /metrics, /healthz, /startupz, /readyz (with the resolver's error detail for loopback clients only) and /debug/endpoints (loopback clients only), holding at most "+strconv.Itoa(admin.DefaultMaxConnections)+" connections at once. Carries no credentials and proxies nothing.")
	fs.StringVar(&c.WriteKubeconfig, "write-kubeconfig", c.WriteKubeconfig,
		"Once the listener is ready, atomically write a kubeconfig that points at http://<listen-address>, for the client container: without credentials (mode 0644), or with --listen-tls at https:// with the loopback CA and client certificate and key (mode 0600).")
	fs.StringVar(&c.Engine.Balancer.Policy, "balancer", c.Engine.Balancer.Policy,
		"Balancing policy: least-request (power of two choices over in-flight requests weighted by peak-EWMA latency) or round-robin.")
	fs.DurationVar(&c.Listener.ShutdownGrace, "shutdown-grace", c.Listener.ShutdownGrace,
		"On SIGTERM: how long short requests and upgraded connections (exec, attach, port-forward) may take to finish; upgraded connections still open then are closed. Watches are ended cleanly at once so clients re-watch.")
	fs.DurationVar(&c.Engine.Probe.Interval, "probe-interval", c.Engine.Probe.Interval,
		"How often to GET /readyz on each endpoint (timeout 1s, or the interval if shorter), with the kubeconfig's credentials, over connections of its own. An endpoint failing --probe-fall probes in a row gets no requests until --probe-rise probes pass; 0 disables probing.")
	fs.BoolVar(&c.Engine.SkewRouting, "skew-routing", c.Engine.SkewRouting,
		"Read each endpoint's discovery (GET /api and /apis, aggregated, with ETags) and /version when it appears or turns ready again and every --discovery-interval, with the kubeconfig's credentials, over the probes' connections. "+
			"While the endpoints serve different group/versions or resources (an upgrade), send a resource request only to endpoints that serve it, never move a watch to one that does not, "+
			"and send a request answered 404 \"no such path\" (not an object's 404) once to an endpoint that serves it, within --retry-budget. false turns all three off.")
	fs.DurationVar(&c.Engine.APIs.Interval, "discovery-interval", c.Engine.APIs.Interval,
		"With --skew-routing, how often each endpoint's discovery is read again; an unchanged document costs a 304.")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "Log format: text or json.")
	fs.IntVarP(&c.Verbosity, "v", "v", c.Verbosity, "Log verbosity: 0 info, 1 debug, 2 also dependency-injection events, 4 also one line per request as it ends "+
		"(method, path, list and watch query parameters, User-Agent, the apiserver that answered, status, attempts, duration, and how a watch ended; never credentials).")
	fs.BoolVar(&c.Engine.Proxy.EndpointHeader, "debug-endpoint-header", c.Engine.Proxy.EndpointHeader,
		"Add X-Fanout-Endpoint (the kube-apiserver host:port that answered, or on fanout's own error the last one tried) and X-Fanout-Attempts (times the request was sent) to every answer but upgrades. "+
			"It tells the client the apiservers' addresses: see docs/security.md.")
	fs.BoolVar(&c.ListenTLS, "listen-tls", c.ListenTLS,
		"Serve TLS on --listen-address (HTTP/2 and HTTP/1.1) with a CA generated in memory at start, and require a client certificate from that CA. "+
			"The CA and the client certificate and key are written into --write-kubeconfig (mode 0600, so the client must run as the same user), which is then the only way in: for pods that share loopback with other processes (hostNetwork). Requires --write-kubeconfig.")
	fs.BoolVar(&c.Admin.EnablePprof, "enable-pprof", c.Admin.EnablePprof,
		"Serve Go's /debug/pprof/ profiles on --admin-address, to loopback clients only (use kubectl port-forward). CPU profiles and traces: ?seconds=20 at most.")
	fs.Float64Var(&c.Engine.Balancer.MaxEjectedFraction, "max-ejected-fraction", c.Engine.Balancer.MaxEjectedFraction,
		"Largest share of endpoints (rounded up) that passive outlier detection may eject at once; beyond it ejections are ignored. Endpoints failing /readyz or shutting down are always left out unless none is left.")
	fs.IntVar(&c.Engine.Balancer.ConsecutiveFailures, "outlier-consecutive-failures", c.Engine.Balancer.ConsecutiveFailures,
		"Consecutive 5xx answers, timeouts or broken connections that eject an endpoint (a refused connection ejects at once). Ejections last 1s, doubling up to 30s while the endpoint keeps failing.")
	fs.DurationVar(&c.Engine.Balancer.SlowStart, "slow-start", c.Engine.Balancer.SlowStart,
		"Window over which an endpoint that just became usable (added, ready again, back from an ejection) ramps from 10% to its full share of requests and new watches; 0 disables.")
	fs.Float64Var(&c.Engine.Proxy.RetryBudget.Ratio, "retry-budget", c.Engine.Proxy.RetryBudget.Ratio,
		"Retries to another endpoint (after a shutdown answer, a 429 or an unprocessed request) may add at most this fraction of the requests of the last 10s, plus --retry-budget-min.")
	fs.IntVar(&c.Engine.Proxy.RetryBudget.Min, "retry-budget-min", c.Engine.Proxy.RetryBudget.Min,
		"Retries allowed per 10s whatever the request rate.")
	fs.IntVar(&c.Engine.Probe.Rise, "probe-rise", c.Engine.Probe.Rise,
		"Passing /readyz probes in a row that bring a not-ready endpoint back.")
	fs.IntVar(&c.Engine.Probe.Fall, "probe-fall", c.Engine.Probe.Fall,
		"Failing /readyz probes in a row that take a ready endpoint out.")
	fs.BoolVar(&c.Engine.WatchRebalance, "watch-rebalance", c.Engine.WatchRebalance,
		"End watches on an apiserver that holds more than its share, between two events, so that clients re-watch (without re-listing) on the least loaded one; "+
			"only watches past their initial events, at least 10s old, that have passed on an event newer than the other apiservers' readiness. Never exec, attach, port-forward or logs.")
	fs.Float64Var(&c.Engine.Rebalance.Rate, "watch-rebalance-rate", c.Engine.Rebalance.Rate,
		"Most watches --watch-rebalance ends per second, on average.")
	fs.Float64Var(&c.Engine.Rebalance.Tolerance, "watch-rebalance-tolerance", c.Engine.Rebalance.Tolerance,
		"Watches are moved while the most and least loaded apiservers differ by more than this fraction of the fair share (and by more than 1).")
	fs.BoolVar(&c.Engine.Rebalance.Freshness, "watch-freshness-requests", c.Engine.Rebalance.Freshness,
		"With --watch-rebalance, when an apiserver becomes ready, send every other apiserver holding watches that passed on no event or bookmark newer than that readiness yet (quiet resources) "+
			"one LIST per resource (limit=1, resourceVersion unset, the watch's credentials), so that its watch cache catches up with etcd and its next bookmark, within a minute, "+
			"carries a resourceVersion the new apiserver serves: the watches can then move, and their clients resume without re-listing if their apiserver goes next (a roll).")
	fs.IntVar(&c.Engine.Cost.Size, "cost-table-size", c.Engine.Cost.Size,
		"Keys (component from the User-Agent, verb, group, resource, subresource, scope) the table of who costs what holds, served at the admin server's /debug/cost; "+
			"the least recently used key's counts fold into one \"other\" row. 0 turns the table off (docs/cost.md).")
	fs.IntVar(&c.Engine.Cost.MetricsTop, "cost-metrics-top", c.Engine.Cost.MetricsTop,
		"Costliest keys of the cost table exported as fanout_cost_* series (11 each); the others are summed into component=\"other\". At most 500.")
	c.addZoneFlags(fs)
	fs.Var(autoInt{"--max-connections", &c.Listener.MaxConnections}, "max-connections",
		"Most client connections open at once on the listener, exec and port-forward connections included; more are closed at accept (fanout_rejected_total{reason=\"connections\"}). Over HTTP/1.1 client-go opens one connection per watch. "+
			"auto: a quarter of the Go memory limit (--memory-limit) over 32 KiB per connection, at least 256 and at most 8192 (8192 without a limit); 1843 under a 256Mi container limit.")
	fs.Var(autoSize{"--replay-budget", &c.Engine.Proxy.ReplayBudget}, "replay-budget",
		"Most bytes of request bodies kept in memory at once, all requests together, so that a request the apiserver never processed can be sent again (each body up to 1 MiB). "+
			"A body that finds the budget spent streams through once and is never retried (fanout_replay_budget_exhausted_total); requests without a body take none. "+
			"auto: an eighth of the Go memory limit (--memory-limit), at least 4Mi and at most 64Mi (64Mi without a limit); off keeps no body.")
	fs.Var(autoSize{"--answer-window-budget", &c.Engine.Transport.AnswerWindowBudget}, "answer-window-budget",
		"Most bytes that kube-apiserver's answers hold in fanout beyond 2 KiB of HTTP/2 window and 2 KiB of copy buffer per request, all requests together: what answers a client does not read can make fanout hold is 4 KiB per request plus this. "+
			"A short request's stream starts with a 64 KiB window from the budget while it has room, and a stream whose reader keeps up grows its window (up to 1 MiB) with bytes of the budget and gives them back as it stops needing them, and a short answer is copied to the client with a 32 KiB buffer of the budget; when the budget is spent streams keep the window they have and copies use 2 KiB buffers (fanout_answer_window_budget_exhausted_total). "+
			"auto: a 128th of the Go memory limit (--memory-limit), at least 1Mi and at most 64Mi (64Mi without a limit); 1.8Mi under a 256Mi container limit; off: no budget, every stream gets 1 MiB up front.")
	fs.StringVar((*string)(&c.Engine.Transport.Client), "upstream-http2", string(c.Engine.Transport.Client),
		"HTTP/2 client of the connections to kube-apiserver: own (fanout's) or std (net/http's); std is for measuring the two against each other (docs/benchmarks.md#own-protocol-stacks-against-the-standard-library), not for production: it has no --answer-window-budget, so every stream gets a 1 MiB window up front and unread answers are bounded per stream only.")
	fs.IntVar(&c.Listener.MaxInflight, "max-inflight", c.Listener.MaxInflight,
		"Most short requests (everything but watch, logs, exec, attach, port-forward, proxy) served at once; more are answered 429 with Retry-After: 1, which client-go retries (fanout_rejected_total{reason=\"short_inflight\"}).")
	fs.IntVar(&c.Listener.MaxLongRunning, "max-long-running", c.Listener.MaxLongRunning,
		"Most long-running requests (watch, logs, exec, attach, port-forward, proxy) open at once, a budget apart from --max-inflight so that many watches never starve short requests; more are answered 429 (fanout_rejected_total{reason=\"long_inflight\"}).")
	fs.IntVar(&c.Listener.MaxConcurrentStreams, "max-concurrent-streams", c.Listener.MaxConcurrentStreams,
		"Most HTTP/2 streams per client connection (h2c, or HTTP/2 with --listen-tls).")
	fs.IntVar(&c.Listener.MaxHeaderBytes, "max-header-bytes", c.Listener.MaxHeaderBytes,
		"Largest request header block; larger ones get 431.")
	fs.Var(autoSize{"--header-budget", &c.Listener.HeaderBudget}, "header-budget",
		"Most bytes of request headers held at once, all connections and requests together: HTTP/1.1 headers past their first 4 KiB from their first byte until their request ends, "+
			"h2c connections --max-header-bytes each for their life, HTTP/2 requests their header's size while they run. "+
			"A header that finds the budget spent gets 431, an h2c connection is closed at once (fanout_header_budget_exhausted_total). "+
			"auto: a sixteenth of the Go memory limit (--memory-limit), at least 4Mi and at most 64Mi (64Mi without a limit), and at least --max-header-bytes; 14.4Mi under a 256Mi container limit; off: no budget.")
	fs.StringVar(&c.Listener.H1Server, "h1-server", c.Listener.H1Server,
		"Server of plaintext HTTP/1.1 on --listen-address: own (fanout's) or std (net/http's, which then takes h2c too). "+
			"std is for measuring the two against each other (docs/benchmarks.md#own-protocol-stacks-against-the-standard-library), not for production: it lacks what own adds: --header-budget counts an HTTP/1.1 header only once it is read and while its request runs "+
			"(a header being read is bounded by --max-header-bytes per connection only) and h2c connections hold none of it; "+
			"a watch is not streamed apart from its handler, so each open HTTP/1.1 watch keeps two goroutines and its connection's buffers (nearly four times the memory per watch); "+
			"the client leaving is noticed by a read per request, not one watcher for all connections. The limits, timeouts and shutdown are the same. Ignored with --listen-tls.")
	fs.DurationVar(&c.Listener.ReadHeaderTimeout, "read-header-timeout", c.Listener.ReadHeaderTimeout,
		"How long a client may take to send its request headers before the connection is closed (slowloris).")
	fs.DurationVar(&c.Listener.RequestBodyTimeout, "request-body-timeout", c.Listener.RequestBodyTimeout,
		"How long a request may take to send its body, watches, logs and proxy requests included; a late one is reset (fanout_rejected_total{reason=\"body_timeout\"}). Upgrades (exec, attach, port-forward) are exempt: they stream their input for as long as they run.")
	fs.DurationVar(&c.Listener.IdleTimeout, "idle-timeout", c.Listener.IdleTimeout,
		"How long a keep-alive connection without requests stays open.")
}

// Validate checks every value once and says what to change: the
// sidecar's own flags here, the engine's and the listener's by their own
// Validate (whose messages name the flags).
func (c *Config) Validate() error {
	var errs []error
	switch {
	case c.Kubeconfig == "" && !c.InCluster:
		errs = append(errs, errors.New("--kubeconfig is required: the client's original kubeconfig, whose credentials fanout uses (or --in-cluster for the pod's service account)"))
	case c.Kubeconfig != "" && c.InCluster:
		errs = append(errs, errors.New("--kubeconfig and --in-cluster exclude each other: pass the one the client uses"))
	}
	if err := validateListenAddress(c.Listener.ListenAddress, c.Listener.AllowAnyHost); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := net.SplitHostPort(c.Admin.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--admin-address %q: %v; expected host:port such as :7081", c.Admin.ListenAddress, err))
	}
	if c.DiscoveryKubeconfig != "" && !strings.HasPrefix(strings.TrimSpace(c.Engine.Endpoints), "endpointslice://") {
		errs = append(errs, fmt.Errorf("--discovery-kubeconfig %q is only used by --endpoints endpointslice:///namespace/service; drop it or use that resolver", c.DiscoveryKubeconfig))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", c.LogFormat))
	}
	if c.Verbosity < 0 {
		errs = append(errs, fmt.Errorf("-v must not be negative, got %d", c.Verbosity))
	}
	if c.ListenTLS && c.WriteKubeconfig == "" {
		errs = append(errs, errors.New("--listen-tls needs --write-kubeconfig: the client certificate it requires exists only in the kubeconfig fanout writes"))
	}
	errs = append(errs, explicitZeros(c)...)
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Listener.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// explicitZeros refuses a 0 given to a flag whose package reads 0 as "the
// default": on the command line a limit of 0 reads like "no limit", a
// threshold of 0 like "never", and neither is what would happen. The
// ranges themselves are the packages' to check.
func explicitZeros(c *Config) []error {
	var errs []error
	for _, f := range []struct {
		flag string
		v    int
	}{
		{"--max-inflight", c.Listener.MaxInflight},
		{"--max-long-running", c.Listener.MaxLongRunning},
		{"--max-concurrent-streams", c.Listener.MaxConcurrentStreams},
		{"--max-header-bytes", c.Listener.MaxHeaderBytes},
		{"--probe-rise", c.Engine.Probe.Rise},
		{"--probe-fall", c.Engine.Probe.Fall},
		{"--outlier-consecutive-failures", c.Engine.Balancer.ConsecutiveFailures},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", f.flag, f.v))
		}
	}
	for _, f := range []struct {
		flag string
		v    time.Duration
	}{
		{"--read-header-timeout", c.Listener.ReadHeaderTimeout},
		{"--request-body-timeout", c.Listener.RequestBodyTimeout},
		{"--idle-timeout", c.Listener.IdleTimeout},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", f.flag, f.v))
		}
	}
	return errs
}

// validateListenAddress refuses non-loopback addresses: fanout injects the
// client's credentials, so the listener is as sensitive as the key itself.
func validateListenAddress(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen-address %q: %v; expected host:port such as 127.0.0.1:7080", addr, err)
	}
	if port == "" {
		return fmt.Errorf("--listen-address %q has no port; expected host:port such as 127.0.0.1:7080", addr)
	}
	if allowRemote || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("refusing --listen-address %q: fanout adds the client's credentials to every request it forwards, "+
		"so anyone who can reach a non-loopback address would act as the client. "+
		"Use 127.0.0.1:PORT or [::1]:PORT, or pass --allow-remote if that network is trusted", addr)
}

// isLoopbackHost accepts IP literals only: a name such as "localhost" is
// resolved at listen time and could point anywhere.
func isLoopbackHost(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
