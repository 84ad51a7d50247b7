package certs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of credential material, the kind label of the metrics.
const (
	KindCA         = "ca"
	KindClient     = "client"
	KindToken      = "token"
	KindKubeconfig = "kubeconfig"
	KindServing    = "serving"
)

// Metrics exports the state of the watched credentials. One *Metrics may
// be shared by several Credentials and ServingCertificates of a process;
// it is a prometheus.Collector to register once. A nil *Metrics counts
// nothing.
type Metrics struct {
	expiry  *prometheus.GaugeVec
	reloads *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_certificate_expiration_timestamp_seconds",
			Help: "NotAfter of the certificate in use, as a Unix time, by kind (client: the client certificate presented to kube-apiserver; ca: the earliest-expiring certificate of the CA bundle, or for fanout-injector --pki=self the CA that signs its serving certificate; serving: the injector's serving certificate).",
		}, []string{"kind"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_credential_reloads_total",
			Help: "Reloads of changed credential files, by kind (ca, client, token, kubeconfig, serving) and result: success when new material was taken into use, failure when a changed file was unreadable or invalid and the last good material was kept.",
		}, []string{"kind", "result"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.expiry.Describe(ch)
	m.reloads.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.expiry.Collect(ch)
	m.reloads.Collect(ch)
}

// track makes the reload series of kind exist at zero, so that an alert
// on failures has a series before the first one.
func (m *Metrics) track(kind string) {
	if m == nil {
		return
	}
	m.reloads.WithLabelValues(kind, "success")
	m.reloads.WithLabelValues(kind, "failure")
}

func (m *Metrics) reloaded(kind string, ok bool) {
	if m == nil {
		return
	}
	result := "failure"
	if ok {
		result = "success"
	}
	m.reloads.WithLabelValues(kind, result).Inc()
}

// expires sets the expiration of kind; a zero t (no such certificate)
// removes the series.
func (m *Metrics) expires(kind string, t time.Time) {
	if m == nil {
		return
	}
	if t.IsZero() {
		m.expiry.DeleteLabelValues(kind)
		return
	}
	m.expiry.WithLabelValues(kind).Set(float64(t.Unix()))
}

// SetExpiration sets the expiration of kind for material the certs
// package does not load itself (fanout-injector --pki=self keeps its CA
// and serving certificate in a Secret); a zero t removes the series.
func (m *Metrics) SetExpiration(kind string, t time.Time) { m.expires(kind, t) }
