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
	"github.com/fanout-dev/fanout/components/balancer"
)

// Options are the sidecar's command-line flags. The flag names are fanout's
// public interface: keep them.
type Options struct {
	Kubeconfig string
	Endpoints  string
	// DiscoveryKubeconfig is "", a path, or DiscoveryInCluster.
	DiscoveryKubeconfig string
	TLSServerName       string
	ListenAddress       string
	AllowRemote         bool
	// AllowSharedLoopback permits plaintext on loopback in a network
	// namespace shared with the node (netns.go).
	AllowSharedLoopback bool
	AdminAddress        string
	WriteKubeconfig     string
	Balancer            string
	ShutdownGrace       time.Duration
	ProbeInterval       time.Duration
	Resilience          ResilienceOptions
	Rebalance           RebalanceOptions
	LogFormat           string
	Verbosity           int
	// InCluster uses the pod's ServiceAccount token and CA instead of
	// Kubeconfig (--in-cluster).
	InCluster bool
	// Limits bound what local clients can make fanout hold (limits.go).
	Limits LimitOptions
	// EnablePprof serves /debug/pprof/ on the admin address to loopback
	// clients.
	EnablePprof bool
	// ListenTLS serves TLS with a per-pod CA and requires its client
	// certificate, both written into WriteKubeconfig.
	ListenTLS bool
}

// DiscoveryInCluster is the --discovery-kubeconfig value that selects the
// pod's service account.
const DiscoveryInCluster = "in-cluster"

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		ListenAddress: "127.0.0.1:7080",
		AdminAddress:  ":7081",
		Balancer:      "least-request",
		ShutdownGrace: 30 * time.Second,
		ProbeInterval: 2 * time.Second,
		Resilience:    defaultResilience(),
		Rebalance:     defaultRebalance(),
		LogFormat:     "text",
		Limits:        NewLimitOptions(),
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"The client's original kubeconfig (required). fanout uses its current context's server, CA, client certificate/key and token or tokenFile. Exec and auth-provider plugins are not supported.")
	fs.BoolVar(&o.InCluster, "in-cluster", o.InCluster,
		"Instead of --kubeconfig, use the pod's service account, as in-cluster clients do: the token and ca.crt under /var/run/secrets/kubernetes.io/serviceaccount (the token is re-read when the kubelet rotates it) and https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.")
	fs.StringVar(&o.Endpoints, "endpoints", o.Endpoints,
		"kube-apiserver endpoints: a comma-separated list of https://host:port; dns:///name:port (A/AAAA records, looked up every 5s); "+
			"or endpointslice:///namespace/service[:port-name] (the Service's EndpointSlices, watched; e.g. endpointslice:///default/kubernetes; "+
			"terminating endpoints get no new requests). Discovery failures keep the last known endpoints, and until discovery first succeeds fanout uses the kubeconfig's server. "+
			"Default: the kubeconfig's server alone.")
	fs.StringVar(&o.DiscoveryKubeconfig, "discovery-kubeconfig", o.DiscoveryKubeconfig,
		"Credentials for --endpoints endpointslice:///...: empty uses --kubeconfig (its server, directly); a path uses that kubeconfig, read as --kubeconfig is (no exec or auth-provider plugins); "+
			"\"in-cluster\" uses the pod's service account. They need get, list and watch on discovery.k8s.io endpointslices in the namespace (see manifests/rbac).")
	fs.StringVar(&o.TLSServerName, "tls-server-name", o.TLSServerName,
		"Server name verified on every endpoint's certificate. Default: the kubeconfig's tls-server-name, else the host of its server URL.")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress,
		"Plaintext HTTP/1.1 and h2c (prior knowledge) listener for the client (TLS with --listen-tls). Must be a loopback address unless --allow-remote is set, because fanout adds the client's credentials to every request. "+
			"Requests must be addressed to it by loopback name or address (Host localhost, 127.0.0.0/8 or ::1, any port), against DNS rebinding; others get 403.")
	fs.BoolVar(&o.AllowRemote, "allow-remote", o.AllowRemote,
		"Allow a non-loopback --listen-address, and requests addressed to any Host. Anyone who reaches it acts with the client's identity.")
	fs.BoolVar(&o.AllowSharedLoopback, "allow-shared-loopback", o.AllowSharedLoopback,
		"Allow a plaintext listener when fanout runs in a network namespace shared with the node (hostNetwork, static pods, a process on a host), "+
			"which fanout recognises by a hardware network device or a bridge in /sys/class/net. Every process there can then act as the client: prefer --listen-tls.")
	fs.StringVar(&o.AdminAddress, "admin-address", o.AdminAddress,
		"Admin listener for /metrics, /healthz, /startupz, /readyz (with the resolver's error detail for loopback clients only) and /debug/endpoints (loopback clients only), holding at most "+strconv.Itoa(admin.DefaultMaxConnections)+" connections at once. Carries no credentials and proxies nothing.")
	fs.StringVar(&o.WriteKubeconfig, "write-kubeconfig", o.WriteKubeconfig,
		"Once the listener is ready, atomically write a kubeconfig that points at http://<listen-address>, for the client container: without credentials (mode 0644), or with --listen-tls at https:// with the loopback CA and client certificate and key (mode 0600).")
	fs.StringVar(&o.Balancer, "balancer", o.Balancer,
		"Balancing policy: least-request (power of two choices over in-flight requests weighted by peak-EWMA latency) or round-robin.")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", o.ShutdownGrace,
		"On SIGTERM: how long short requests and upgraded connections (exec, attach, port-forward) may take to finish; upgraded connections still open then are closed. Watches are ended cleanly at once so clients re-watch.")
	fs.DurationVar(&o.ProbeInterval, "probe-interval", o.ProbeInterval,
		"How often to GET /readyz on each endpoint (timeout 1s, or the interval if shorter), with the kubeconfig's credentials, over connections of its own. An endpoint failing --probe-fall probes in a row gets no requests until --probe-rise probes pass; 0 disables probing.")
	o.Resilience.addFlags(fs)
	o.Rebalance.addFlags(fs)
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: text or json.")
	fs.IntVarP(&o.Verbosity, "v", "v", o.Verbosity, "Log verbosity: 0 info, 1 debug, 2 also dependency-injection events.")
	fs.BoolVar(&o.ListenTLS, "listen-tls", o.ListenTLS,
		"Serve TLS on --listen-address (HTTP/2 and HTTP/1.1) with a CA generated in memory at start, and require a client certificate from that CA. "+
			"The CA and the client certificate and key are written into --write-kubeconfig (mode 0600, so the client must run as the same user), which is then the only way in: for pods that share loopback with other processes (hostNetwork). Requires --write-kubeconfig.")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", o.EnablePprof,
		"Serve Go's /debug/pprof/ profiles on --admin-address, to loopback clients only (use kubectl port-forward). CPU profiles and traces: ?seconds=20 at most.")
	o.Limits.AddFlags(fs)
}

// Validate checks the flags and says what to change.
func (o *Options) Validate() error {
	var errs []error
	switch {
	case o.Kubeconfig == "" && !o.InCluster:
		errs = append(errs, errors.New("--kubeconfig is required: the client's original kubeconfig, whose credentials fanout uses (or --in-cluster for the pod's service account)"))
	case o.Kubeconfig != "" && o.InCluster:
		errs = append(errs, errors.New("--kubeconfig and --in-cluster exclude each other: pass the one the client uses"))
	}
	if err := validateListenAddress(o.ListenAddress, o.AllowRemote); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := net.SplitHostPort(o.AdminAddress); err != nil {
		errs = append(errs, fmt.Errorf("--admin-address %q: %v; expected host:port such as :7081", o.AdminAddress, err))
	}
	if err := (balancer.Config{Policy: o.Balancer}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.DiscoveryKubeconfig != "" && !strings.HasPrefix(strings.TrimSpace(o.Endpoints), "endpointslice://") {
		errs = append(errs, fmt.Errorf("--discovery-kubeconfig %q is only used by --endpoints endpointslice:///namespace/service; drop it or use that resolver", o.DiscoveryKubeconfig))
	}
	if o.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-grace must not be negative, got %s", o.ShutdownGrace))
	}
	if err := o.Resilience.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Rebalance.validate(); err != nil {
		errs = append(errs, err)
	}
	if o.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("--probe-interval must not be negative, got %s; use 0 to disable probing", o.ProbeInterval))
	}
	switch o.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", o.LogFormat))
	}
	if o.Verbosity < 0 {
		errs = append(errs, fmt.Errorf("-v must not be negative, got %d", o.Verbosity))
	}
	if o.ListenTLS && o.WriteKubeconfig == "" {
		errs = append(errs, errors.New("--listen-tls needs --write-kubeconfig: the client certificate it requires exists only in the kubeconfig fanout writes"))
	}
	if err := o.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
	if allowRemote {
		return nil
	}
	if isLoopbackHost(host) {
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
