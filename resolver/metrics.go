package resolver

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the resolvers' Prometheus series. A nil *Metrics records
// nothing, so resolvers built without one (tests, tools) need no registry.
//
// Metrics is a prometheus.Collector: register it once with the app's
// Registerer. It is also fed every published snapshot through Update, for
// the endpoint counts, whatever resolver produced it.
type Metrics struct {
	errors      *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	endpoints   *prometheus.GaugeVec

	mu     sync.Mutex // guards status
	status status
}

// status is the resolver's state as the last resolution left it.
type status struct {
	resolver string
	failing  bool
	err      error
	errAt    time.Time
	// serving says what fanout uses meanwhile, e.g. "the last known 3
	// endpoints".
	serving string
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_resolver_errors_total",
			Help: "Failed or empty endpoint resolutions, by resolver (dns, endpointslice). The last good endpoint set stays in use.",
		}, []string{"resolver"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_resolver_last_success_timestamp_seconds",
			Help: "Unix time of the last resolution that found endpoints, by resolver; alert when it falls far behind.",
		}, []string{"resolver"}),
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_resolver_endpoints",
			Help: "Endpoints in the last published snapshot by state (ready, or draining: terminating or not ready, taking no new requests).",
		}, []string{"state"}),
	}
	m.endpoints.WithLabelValues("ready")
	m.endpoints.WithLabelValues("draining")
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.errors.Describe(ch)
	m.lastSuccess.Describe(ch)
	m.endpoints.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.errors.Collect(ch)
	m.lastSuccess.Collect(ch)
	m.endpoints.Collect(ch)
}

// Update counts a published snapshot's endpoints by state.
func (m *Metrics) Update(eps []Endpoint) {
	if m == nil {
		return
	}
	draining := 0
	for _, ep := range eps {
		if ep.Draining {
			draining++
		}
	}
	m.endpoints.WithLabelValues("ready").Set(float64(len(eps) - draining))
	m.endpoints.WithLabelValues("draining").Set(float64(draining))
}

// Status reports whether the last resolution succeeded and, when it did
// not, a one-line detail for /readyz: which resolver, how long ago and why
// it failed, and what fanout serves meanwhile. It is safe for concurrent
// use; a nil *Metrics is always healthy.
func (m *Metrics) Status() (healthy bool, detail string) {
	if m == nil {
		return true, ""
	}
	m.mu.Lock()
	st := m.status
	m.mu.Unlock()
	if !st.failing {
		return true, ""
	}
	ago := time.Since(st.errAt).Round(time.Second)
	return false, fmt.Sprintf("resolver %s: last error %s ago: %v; serving %s", st.resolver, ago, st.err, st.serving)
}

func (m *Metrics) failed(resolver string, err error, serving string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(resolver).Inc()
	m.mu.Lock()
	m.status = status{resolver: resolver, failing: true, err: err, errAt: time.Now(), serving: serving}
	m.mu.Unlock()
}

func (m *Metrics) succeeded(resolver string) {
	if m == nil {
		return
	}
	m.lastSuccess.WithLabelValues(resolver).Set(float64(time.Now().UnixNano()) / 1e9)
	m.mu.Lock()
	m.status = status{resolver: resolver}
	m.mu.Unlock()
}
