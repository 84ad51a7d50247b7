package listener

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the collectors of the listener's limits. Labels are bounded:
// reason is one of the reject* constants, kind short or long.
type Metrics struct {
	rejected    *prometheus.CounterVec
	connections prometheus.Gauge
	inflight    *prometheus.GaugeVec
	inherited   prometheus.Gauge
	// The header budget's (headerbudget.go).
	headerUsed, headerLimit prometheus.Gauge
	headerExhausted         prometheus.Counter
}

// NewMetrics creates the collectors and registers them with reg. A nil
// reg leaves them unregistered, which tests use.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := newMetrics()
	if reg != nil {
		for _, c := range m.Collectors() {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func newMetrics() *Metrics {
	m := &Metrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_rejected_total",
			Help: "Client connections and requests refused by a downstream limit, by reason: connections (--max-connections, closed at accept), short_inflight (--max-inflight, 429), long_inflight (--max-long-running, 429), body_timeout (--request-body-timeout, request body not received in time).",
		}, []string{"reason"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_downstream_connections",
			Help: "Client connections open on the proxy listener, upgraded (exec, port-forward) ones included.",
		}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_downstream_inflight_requests",
			Help: "Client requests being served, by kind (short; long: watch, logs, exec, port-forward, proxy), as counted against --max-inflight and --max-long-running.",
		}, []string{"kind"}),
		inherited: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_listener_inherited",
			Help: "1 when the client listener's socket came from `fanout hold` (--listen-from), which keeps it open while fanout restarts; 0 when fanout opened it itself.",
		}),
		headerUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_header_budget_used_bytes",
			Help: "Bytes of request headers held, all connections and requests together (HTTP/1.1 headers past their first 4 KiB, h2c connections --max-header-bytes each, HTTP/2 requests their header's size); at most fanout_header_budget_limit_bytes.",
		}),
		headerLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_header_budget_limit_bytes",
			Help: "The header budget (--header-budget): the most bytes of request headers held at once; 0 when it is off.",
		}),
		headerExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_header_budget_exhausted_total",
			Help: "Request headers answered 431, and h2c connections closed at once, because the header budget was spent.",
		}),
	}
	// Known label values start at 0 so that a rate() or an alert sees the
	// series before its first event.
	for _, r := range []string{rejectConnections, rejectShort, rejectLong, rejectBodyTimeout} {
		m.rejected.WithLabelValues(r)
	}
	return m
}

// Collectors are the listener's collectors, for a caller that registers
// them itself.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.rejected, m.connections, m.inflight, m.inherited, m.headerUsed, m.headerLimit, m.headerExhausted}
}
