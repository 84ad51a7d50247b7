package pki

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what the Manager wrote. Labels are bounded: kind is ca or
// serving. The expiry of the certificates in use is the certs package's
// fanout_certificate_expiration_timestamp_seconds (Config.Expiry).
type Metrics struct {
	// Issued counts certificates this replica issued and stored in the
	// Secret, by kind: ca (the first, a successor, or a replacement of an
	// unusable one) and serving.
	Issued *prometheus.CounterVec
	// CABundleWrites counts writes of the webhook configuration's caBundle:
	// the first one, one per CA rotation, and repairs of a caBundle that
	// someone else changed (a kubectl apply of a manifest without it).
	CABundleWrites prometheus.Counter
	// SyncErrors counts synchronisations that failed (API errors, missing
	// RBAC, a missing webhook configuration); each is retried.
	SyncErrors prometheus.Counter
}

// Kinds of issued certificates, the kind label of Issued.
const (
	KindCA      = "ca"
	KindServing = "serving"
)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_injector_pki_certificates_issued_total",
			Help: "Certificates fanout-injector --pki=self issued and stored in its Secret, by kind (ca, serving).",
		}, []string{"kind"}),
		CABundleWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_injector_pki_ca_bundle_writes_total",
			Help: "Writes of the caBundle of the injector's MutatingWebhookConfiguration by fanout-injector --pki=self: the first, one per CA rotation, and repairs of a caBundle changed by someone else.",
		}),
		SyncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_injector_pki_sync_errors_total",
			Help: "Failed synchronisations of fanout-injector --pki=self's Secret or caBundle (API errors, missing RBAC, no webhook configuration); each is retried and the certificate in use is kept.",
		}),
	}
	m.Issued.WithLabelValues(KindCA)
	m.Issued.WithLabelValues(KindServing)
	for _, c := range []prometheus.Collector{m.Issued, m.CABundleWrites, m.SyncErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
