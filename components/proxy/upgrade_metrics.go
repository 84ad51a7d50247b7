package proxy

import "github.com/prometheus/client_golang/prometheus"

// upgradeMetrics are the collectors of upgrade requests (exec, attach,
// port-forward). Labels are bounded: protocol is spdy, websocket or other;
// result is upgraded, rejected or error.
type upgradeMetrics struct {
	open  *prometheus.GaugeVec
	total *prometheus.CounterVec
}

func newUpgradeMetrics() upgradeMetrics {
	u := upgradeMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_upgraded_connections",
			Help: "Upgraded (hijacked) client connections currently proxied to kube-apiserver, by protocol (spdy, websocket, other).",
		}, []string{"protocol"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_upgrades_total",
			Help: "Upgrade requests (exec, attach, port-forward) by protocol (spdy, websocket, other) and result (upgraded: the apiserver switched protocols; rejected: it answered with an error status; error: fanout got no answer from any apiserver).",
		}, []string{"protocol", "result"}),
	}
	// The gauge starts at 0 for each protocol, so that a dashboard sees
	// the series before the first upgrade.
	for _, proto := range []string{protoSPDY, protoWebSocket, protoOther} {
		u.open.WithLabelValues(proto)
	}
	return u
}

func (u upgradeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{u.open, u.total}
}

func (m *Metrics) upgraded(proto, result string) {
	m.upgrades.total.WithLabelValues(proto, result).Inc()
}
