package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics count the injector's decisions and refusals. Labels are bounded:
// reason takes the values of Reasons or of Rejections only.
type Metrics struct {
	Mutations prometheus.Counter
	Skipped   *prometheus.CounterVec
	// Rejected counts requests answered without a review of the pod, by
	// Rejection.
	Rejected *prometheus.CounterVec
	// InFlight is the reviews holding a slot of --max-concurrent-reviews;
	// Queued those waiting for one.
	InFlight prometheus.Gauge
	Queued   prometheus.Gauge
	// ConnectionsEvicted counts idle connections closed to make room under
	// --max-connections.
	ConnectionsEvicted prometheus.Counter
}

// Rejection says why a request got no review of its pod. The values are
// metric labels.
type Rejection string

const (
	// RejectTooLarge: a body above MaxReviewBytes, answered 413.
	RejectTooLarge Rejection = "too-large"
	// RejectTooComplex: a review beyond MaxReviewValues, MaxPodContainers
	// or MaxPodVolumes, answered with the pod allowed unmutated and a
	// warning.
	RejectTooComplex Rejection = "too-complex"
	// RejectBusy: no slot of --max-concurrent-reviews freed within the
	// queue wait, answered 429 with Retry-After.
	RejectBusy Rejection = "busy"
	// RejectMalformed: not a POST of an AdmissionReview to a webhook path
	// (400, 404, 405).
	RejectMalformed Rejection = "malformed"
	// RejectClientCertificate: with --client-ca-file, a TLS handshake
	// without a client certificate, or with one its CAs do not verify.
	RejectClientCertificate Rejection = "client-certificate"
)

// Rejections lists every Rejection, so that metrics start at zero.
var Rejections = []Rejection{RejectTooLarge, RejectTooComplex, RejectBusy, RejectMalformed, RejectClientCertificate}

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
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_injector_rejected_total",
			Help: "Requests to the webhook answered without reviewing a pod, by reason (too-large, too-complex, busy, malformed, client-certificate). Except for too-complex, kube-apiserver then admits the pod unmutated (failurePolicy Ignore).",
		}, []string{"reason"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_injector_reviews_in_flight",
			Help: "Admission reviews being read or decided (at most --max-concurrent-reviews).",
		}),
		Queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_injector_reviews_queued",
			Help: "Admission reviews waiting for a --max-concurrent-reviews slot.",
		}),
		ConnectionsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_injector_connections_evicted_total",
			Help: "Idle webhook connections closed to make room for a new one at --max-connections.",
		}),
	}
	for _, r := range Reasons {
		m.Skipped.WithLabelValues(string(r))
	}
	for _, r := range Rejections {
		m.Rejected.WithLabelValues(string(r))
	}
	for _, c := range []prometheus.Collector{m.Mutations, m.Skipped, m.Rejected, m.InFlight, m.Queued, m.ConnectionsEvicted} {
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

func (m *Metrics) reject(r Rejection) { m.Rejected.WithLabelValues(string(r)).Inc() }
