// Package admin serves fanout's operational endpoints: /metrics, /healthz,
// /readyz, /debug/endpoints and /debug/cost. It proxies nothing and holds no credentials,
// which is why it may listen on every interface: kubelet probes and
// Prometheus reach a pod on its IP, not on 127.0.0.1.
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/internal/serve"
)

// State is what the admin server reports on. *balancer.Balancer satisfies
// it; both methods are safe for concurrent use.
type State interface {
	// Ready reports whether at least one endpoint is usable.
	Ready() bool
	// Endpoints returns a per-endpoint snapshot, sorted by address.
	Endpoints() []balancer.EndpointStatus
}

// ResolverStatus reports on endpoint discovery for /readyz. *resolver.Metrics
// satisfies it. Status is safe for concurrent use.
type ResolverStatus interface {
	// Status reports whether the last resolution succeeded and, if not,
	// a one-line detail: how long ago and why it failed, and what fanout
	// serves meanwhile.
	Status() (healthy bool, detail string)
}

// Config configures the admin server.
type Config struct {
	// ListenAddress is host:port; ":7081" listens on every interface.
	ListenAddress string
	// EnablePprof serves /debug/pprof/ to loopback clients (WithPprof).
	EnablePprof bool
	// MaxConnections caps the connections the admin server holds open;
	// at the cap the one idle longest makes room for a new one, and a new
	// one is closed at accept only when all are mid-request. 0 means
	// DefaultMaxConnections.
	MaxConnections int
}

// DefaultMaxConnections is the admin server's connection cap. Its clients
// are a few: the kubelet's probes (one short connection each), one or two
// Prometheus scrapers, a person with kubectl port-forward. The port is
// open to the pod network, and without a cap anyone who reaches it could
// make the sidecar hold a goroutine, buffers and a file descriptor per
// connection, up to the 5 s header timeout each, at any rate. Idle
// connections are evicted at the cap, so holding them open does not lock
// the kubelet's probes out.
const DefaultMaxConnections = 64

// idleTimeout closes an admin keep-alive connection this long after its
// last request. The kubelet opens a new connection per probe and
// Prometheus scrapes every 15 s or more, so keeping connections longer
// saves nobody a handshake and only holds slots.
const idleTimeout = 5 * time.Second

// Server is the admin HTTP server.
type Server struct {
	cfg Config
	*serve.Server
	// evicted counts idle connections closed to make room at the cap.
	evicted prometheus.Counter
}

// NewHandler returns the admin mux. gatherer serves /metrics. resolver may
// be nil, as for a static endpoint list.
func NewHandler(state State, gatherer prometheus.Gatherer, resolver ResolverStatus) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The process serves HTTP, so it is alive; endpoint trouble is a
		// readiness matter and must not get the sidecar restarted.
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// The resolver's detail quotes its raw error, which can name the
		// discovery kubeconfig's user, file paths and apiserver addresses:
		// it is for someone with a shell in the pod, like /debug/endpoints.
		// The pod network (kubelet probes, anyone who reaches the pod IP)
		// gets the status line only; the status code is the same for both.
		detail := ""
		if isLoopbackClient(r) {
			detail = resolverDetail(resolver)
		}
		if !state.Ready() {
			writeText(w, http.StatusServiceUnavailable, "no usable kube-apiserver endpoint"+detail)
			return
		}
		// A failing resolver leaves readiness alone: the last good
		// endpoints stay in use by design, and failing every sidecar's
		// probe at once because discovery broke would take the pods out
		// of their Services. The detail is for whoever looks.
		writeText(w, http.StatusOK, "ok"+detail)
	})
	mux.Handle("GET /debug/endpoints", WithLoopbackOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Ready     bool                      `json:"ready"`
			Endpoints []balancer.EndpointStatus `json:"endpoints"`
		}{state.Ready(), state.Endpoints()})
	})))
	return mux
}

// Cost is the table of who costs what; *cost.Table satisfies it, a nil
// one included (the table is off). Snapshot is safe for concurrent use.
type Cost interface {
	Snapshot() cost.Snapshot
}

// WithCost serves the cost table as JSON at /debug/cost in front of next,
// to loopback clients only, as /debug/endpoints: it holds every key in
// the table. /metrics exports only the costliest few, with the same
// labels, because Prometheus scrapes over the pod network
// (docs/security.md, "Cost rows on /metrics").
func WithCost(next http.Handler, c Cost) http.Handler {
	costs := WithLoopbackOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c.Snapshot())
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/cost" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			costs.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// resolverDetail is the resolver's status line, preceded by a newline, or
// nothing while the resolver is healthy.
func resolverDetail(r ResolverStatus) string {
	if r == nil {
		return ""
	}
	if healthy, detail := r.Status(); !healthy && detail != "" {
		return "\n" + detail
	}
	return ""
}

// WithLoopbackOnly answers 403 to clients that are not on a loopback
// address. Debug data names every apiserver and its load; it is for someone
// with a shell in the pod, not for the network.
func WithLoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLoopbackClient(r) {
			writeText(w, http.StatusForbidden, "this endpoint answers loopback clients only; use kubectl exec or port-forward")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// isLoopbackClient reports whether r came from a loopback address: a
// process in the pod, or kubectl port-forward (whose connections the
// kubelet opens inside the pod's network namespace).
func isLoopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// NewServer builds the admin server; Start listens. It stays up until the
// proxy has drained (fx stops modules in reverse order), so probes keep
// answering; Stop lets in-flight scrapes finish until its context ends.
func NewServer(cfg Config, h http.Handler, log *slog.Logger) *Server {
	s := &Server{
		cfg: cfg,
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_admin_connections_evicted_total",
			Help: "Idle connections the admin server closed to make room for a new one at its connection cap. A steady rate means something holds connections to the admin port open.",
		}),
		Server: serve.New("admin server", "--admin-address", &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    64 << 10,
		}, log),
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	s.LimitConnections(cfg.MaxConnections, s.evicted)
	return s
}

// Collectors are the admin server's own metrics, for the caller to
// register.
func (s *Server) Collectors() []prometheus.Collector { return []prometheus.Collector{s.evicted} }

// Start listens on the configured address and serves in the background.
func (s *Server) Start(context.Context) error { return s.Server.Start(s.cfg.ListenAddress) }
