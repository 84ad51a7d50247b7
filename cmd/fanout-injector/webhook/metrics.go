package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics count the injector's decisions. Labels are bounded: reason takes
// the values of Reasons only.
type Metrics struct {
	Mutations prometheus.Counter
	Skipped   *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Mutations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_injector_mutations_total",
			Help: "Pods the injector added a fanout sidecar to.",
		}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_injector_skipped_total",
			Help: "Admission requests for pods the injector left unmutated, by reason (not-labelled, already-injected, mirror-pod, host-network, no-kubeconfig, conflict, invalid, opted-out, not-a-client).",
		}, []string{"reason"}),
	}
	for _, r := range Reasons {
		m.Skipped.WithLabelValues(string(r))
	}
	for _, c := range []prometheus.Collector{m.Mutations, m.Skipped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(d Decision) {
	if d.Mutated {
		m.Mutations.Inc()
		return
	}
	m.Skipped.WithLabelValues(string(d.Reason)).Inc()
}
