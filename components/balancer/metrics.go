package balancer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the endpoints' atomics at scrape time, so requests pay
// nothing for metrics and removed endpoints drop out of the next scrape
// instead of leaving stale series behind.
type collector struct {
	b *Balancer

	inflight *prometheus.Desc
	requests *prometheus.Desc
	errors   *prometheus.Desc
	ejected  *prometheus.Desc
	score    *prometheus.Desc
	baseline *prometheus.Desc
	ready    *prometheus.Desc
	count    *prometheus.Desc
	zone     *prometheus.Desc
	skew     *prometheus.Desc
}

// Collector returns a prometheus.Collector for the balancer's endpoints.
// Register it once.
func (b *Balancer) Collector() prometheus.Collector {
	return &collector{
		b: b,
		inflight: prometheus.NewDesc("fanout_endpoint_inflight_requests",
			"Requests in flight to the kube-apiserver endpoint, by kind (short or long-running).",
			[]string{"endpoint", "kind"}, nil),
		requests: prometheus.NewDesc("fanout_endpoint_requests_total",
			"Requests to the kube-apiserver endpoint that have finished.",
			[]string{"endpoint"}, nil),
		errors: prometheus.NewDesc("fanout_endpoint_errors_total",
			"Finished requests to the endpoint that failed: transport error, 429 or 5xx, but for kube-apiserver's 504 Timeout (the request's own deadline ran out).",
			[]string{"endpoint"}, nil),
		ejected: prometheus.NewDesc("fanout_endpoint_ejections_total",
			"Times passive outlier detection ejected the endpoint after consecutive failures.",
			[]string{"endpoint"}, nil),
		score: prometheus.NewDesc("fanout_endpoint_latency_score",
			"Peak-EWMA estimate of the endpoint's latency to response headers for short requests, relative to the usual latency of the same request class on any endpoint (1 = usual, 2 = twice as slow).",
			[]string{"endpoint"}, nil),
		baseline: prometheus.NewDesc("fanout_latency_baseline_seconds",
			"Usual latency to response headers of a successful short request, by request class (verb); the unit of fanout_endpoint_latency_score. Absent until the class has been seen.",
			[]string{"class"}, nil),
		ready: prometheus.NewDesc("fanout_endpoint_ready",
			"1 if the endpoint is eligible for picks, 0 while it is ejected, failing its readiness probe or draining.",
			[]string{"endpoint"}, nil),
		count: prometheus.NewDesc("fanout_endpoints",
			"Known kube-apiserver endpoints by state (ready, ejected, not_ready: failing its readiness probe, or draining: terminating per the resolver).",
			[]string{"state"}, nil),
		zone: prometheus.NewDesc("fanout_zone_requests_total",
			"Finished requests by the locality of the kube-apiserver that served them: local (in fanout's own zone, --zone) or remote. Nothing is counted while fanout's zone is unknown.",
			[]string{"locality"}, nil),
		skew: prometheus.NewDesc("fanout_skew_routed_total",
			"Requests routed away from an endpoint that does not serve their group/version and resource while the endpoints serve different APIs (version skew); requests sent again after a 404 \"no such path\" are counted in fanout_retries_total{reason=\"skew\"}.",
			nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inflight
	ch <- c.requests
	ch <- c.errors
	ch <- c.ejected
	ch <- c.score
	ch <- c.baseline
	ch <- c.ready
	ch <- c.count
	ch <- c.zone
	ch <- c.skew
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var ready, ejected, notReady, draining int
	for _, s := range c.b.Endpoints() {
		up := 0.0
		switch s.State {
		case StateReady:
			up = 1
			ready++
		case StateNotReady:
			notReady++
		case StateDraining:
			draining++
		default:
			ejected++
		}
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(s.InflightShort), s.Address, Short.String())
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(s.InflightLong), s.Address, Long.String())
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.RequestsTotal), s.Address)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(s.ErrorsTotal), s.Address)
		ch <- prometheus.MustNewConstMetric(c.ejected, prometheus.CounterValue, float64(s.EjectionsTotal), s.Address)
		ch <- prometheus.MustNewConstMetric(c.score, prometheus.GaugeValue, s.LatencyScore, s.Address)
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, up, s.Address)
	}
	for i := range numClasses {
		if d, ok := c.b.Baseline(Class(i)); ok {
			ch <- prometheus.MustNewConstMetric(c.baseline, prometheus.GaugeValue, d.Seconds(), Class(i).String())
		}
	}
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(ready), StateReady)
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(ejected), StateEjected)
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(notReady), StateNotReady)
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(draining), StateDraining)
	local, remote := c.b.zoneRequests()
	ch <- prometheus.MustNewConstMetric(c.zone, prometheus.CounterValue, float64(local), localityNames[localityLocal])
	ch <- prometheus.MustNewConstMetric(c.zone, prometheus.CounterValue, float64(remote), localityNames[localityRemote])
	ch <- prometheus.MustNewConstMetric(c.skew, prometheus.CounterValue, float64(c.b.SkewRouted()))
}
