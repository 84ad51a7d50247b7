package transport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/internal/endpointset"
)

type metrics struct {
	dials     *prometheus.CounterVec
	rotations *prometheus.CounterVec
	handshake prometheus.Histogram
	conns     *connCollector

	// The answer window budget's (Config.AnswerWindowBudget); the
	// series stay at 0 without one.
	windowsUsed, windowsLimit prometheus.Gauge
	windowsExhausted          prometheus.Counter

	// endpoints is the endpoint set of the last Retain, whose dial
	// series exist and whose connections are reported at zero when there
	// are none.
	endpoints endpointset.Set
}

// modes are every AuthMode, the known values of the mode label.
var modes = []AuthMode{AuthSidecar, AuthPassthrough}

func newMetrics(t *Transports) *metrics {
	return &metrics{
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_upstream_dials_total",
			Help: "Connections fanout tried to open to kube-apiserver endpoints, by result (ok or error: TCP, TLS or ALPN failure).",
		}, []string{"endpoint", "mode", "result"}),
		rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_upstream_connection_rotations_total",
			Help: "Times a connection pool moved new requests to fresh connections while its old connections drain, by reason: certificate (the client certificate rotated) or unauthorized (kube-apiserver answered 401 to the client certificate).",
		}, []string{"reason"}),
		handshake: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fanout_upstream_tls_handshake_seconds",
			Help:    "Duration of successful TLS handshakes with kube-apiserver endpoints.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10),
		}),
		windowsUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_answer_window_budget_used_bytes",
			Help: "Bytes of HTTP/2 response stream windows granted to kube-apiserver beyond the 2 KiB every stream gets, and of 32 KiB copy buffers of short answers, all requests together: what answers not yet read may hold past those floors; at most fanout_answer_window_budget_limit_bytes.",
		}),
		windowsLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_answer_window_budget_limit_bytes",
			Help: "The answer window budget (--answer-window-budget): the most bytes of response stream windows granted beyond 2 KiB per stream, and of short answers' 32 KiB copy buffers, at once; 0 without a budget.",
		}),
		windowsExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_answer_window_budget_exhausted_total",
			Help: "Times a response stream whose window limited it could not grow it, or a short answer could not get a 32 KiB copy buffer, because the answer window budget was spent; the stream went on with the window it had, the copy with a 2 KiB buffer.",
		}),
		conns: &connCollector{t: t, desc: prometheus.NewDesc(
			"fanout_upstream_connections",
			"Open HTTP/2 connections to kube-apiserver endpoints, including connections of endpoints that left the endpoint set and still carry streams.",
			[]string{"endpoint", "mode"}, nil,
		)},
	}
}

// initRotations makes the rotation series exist at zero.
func (m *metrics) initRotations() {
	m.rotations.WithLabelValues("certificate")
	m.rotations.WithLabelValues("unauthorized")
}

// Collectors returns the transport's metrics, for the app to register.
func (t *Transports) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.metrics.dials, t.metrics.handshake, t.metrics.conns, t.metrics.rotations,
		t.metrics.windowsUsed, t.metrics.windowsLimit, t.metrics.windowsExhausted}
}

func (m *metrics) rotated(reason string) { m.rotations.WithLabelValues(reason).Inc() }

func (m *metrics) dialed(k poolKey, ok bool) {
	result := "error"
	if ok {
		result = "ok"
	}
	m.dials.WithLabelValues(k.address, k.mode.String(), result).Inc()
}

// retain follows the endpoint set (Transports.Retain): the dial series of
// a new endpoint start at zero, for each mode and result, and those of an
// endpoint that left are dropped.
func (m *metrics) retain(addresses []string) {
	m.endpoints.Retain(addresses, func(a string) {
		for _, mode := range modes {
			m.dials.WithLabelValues(a, mode.String(), "ok")
			m.dials.WithLabelValues(a, mode.String(), "error")
		}
	}, func(a string) {
		m.dials.DeletePartialMatch(prometheus.Labels{"endpoint": a})
	})
}

// forget drops the dial series of an endpoint that left the endpoint set,
// so endpoints that come and go (EndpointSlices, DNS) do not grow the
// series count forever. A counter that reappears starts again at zero,
// which Prometheus reads as a reset.
func (m *metrics) forget(k poolKey) {
	m.dials.DeletePartialMatch(prometheus.Labels{"endpoint": k.address, "mode": k.mode.String()})
}

// connCollector counts the tracked connections at scrape time instead of
// keeping a gauge up to date: a pool dropped by Retain while its
// connections drain and a new pool for the same endpoint then share one
// series without either having to know of the other. An endpoint of the
// set without connections reports 0 for each mode; one that left it
// disappears once it has no connection left.
type connCollector struct {
	t    *Transports
	desc *prometheus.Desc
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[poolKey]int{}
	c.t.mu.Lock()
	for conn := range c.t.conns {
		counts[conn.key]++
	}
	c.t.mu.Unlock()
	c.t.metrics.endpoints.Range(func(a string) {
		for _, mode := range modes {
			if k := (poolKey{address: a, mode: mode}); counts[k] == 0 {
				counts[k] = 0
			}
		}
	})
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k.address, k.mode.String())
	}
}
