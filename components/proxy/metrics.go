package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/endpointset"
)

// Metrics are the proxy's Prometheus collectors. All methods are safe for
// concurrent use.
type Metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	retries        *prometheus.CounterVec
	budgetOut      *prometheus.CounterVec
	upstreamErrors *prometheus.CounterVec
	openLong       prometheus.Gauge
	upgrades       upgradeMetrics
	// The replay budget's (replaybudget.go).
	replayUsed, replayLimit prometheus.Gauge
	replayExhausted         prometheus.Counter

	// series caches the fanout_requests_total child per (kind, code,
	// endpoint), resolved on first use as WithLabelValues would: that
	// formats the code and hashes three label values on every request.
	// No series is ever deleted, so a cached child stays the exported one.
	seriesMu sync.RWMutex
	series   map[answeredKey]prometheus.Counter
	// shortDuration is fanout_request_duration_seconds{kind="short"},
	// resolved once, when the metrics are made.
	shortDuration prometheus.Observer

	// endpoints are the endpoints whose fanout_upstream_errors_total
	// series exist (Retain).
	endpoints endpointset.Set
}

// answeredKey names one fanout_requests_total series.
type answeredKey struct {
	kind     balancer.Kind
	code     int
	endpoint string
}

// Reasons for fanout_upstream_errors_total and fanout_retries_total.
const (
	reasonUnprocessed = "unprocessed"
	reasonTimeout     = "timeout"
	reasonCanceled    = "canceled"
	reasonOther       = "other"
)

// NewMetrics creates the collectors and registers them with reg. A nil reg
// leaves them unregistered, which tests and callers without metrics use.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_requests_total",
			Help: "Requests answered by the proxy, by kind (short, long), HTTP status code and kube-apiserver endpoint (empty when none was picked).",
		}, []string{"kind", "code", "endpoint"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fanout_request_duration_seconds",
			Help: "Time from receiving a request to having its response status (headers or an error), including picks and retries. Only short requests are observed: a watch lasts as long as it likes.",
			// kube-apiserver answers most reads in milliseconds; the upper
			// buckets catch its 60 s default request timeout.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_retries_total",
			Help: "Requests sent again, by reason: unprocessed (the apiserver never received it), read (a GET whose connection broke or timed out before the response), shutdown (it answered that it is shutting down), overload (priority and fairness rejected it and another endpoint was not overloaded), throttled (any other 429), gone (a watch whose first event was a 410, moved to another endpoint), unauthorized (a 401 to the client certificate, sent again to the same endpoint on fresh connections after re-reading the credentials), skew (a 404 saying the apiserver serves no such path, sent to one that serves it).",
		}, []string{"reason"}),
		budgetOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_retry_budget_exhausted_total",
			Help: "Retries not made because the retry budget was spent, by reason (as fanout_retries_total); the client got the apiserver's answer or the error.",
		}, []string{"reason"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_upstream_errors_total",
			Help: "Round trips to kube-apiserver that failed without a response, by endpoint and reason (unprocessed, timeout, canceled, other).",
		}, []string{"endpoint", "reason"}),
		openLong: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_open_long_running_requests",
			Help: "Long-running requests (watch, logs, exec, proxy) currently open.",
		}),
		replayUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_replay_budget_used_bytes",
			Help: "Bytes of request bodies held in memory so that their requests can be sent again, all requests together; at most fanout_replay_budget_limit_bytes.",
		}),
		replayLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_replay_budget_limit_bytes",
			Help: "The replay budget (--replay-budget): the most bytes of request bodies held for retries at once.",
		}),
		replayExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_replay_budget_exhausted_total",
			Help: "Requests whose body streamed through once, without a copy kept for a retry, because the replay budget was spent; such a request is never sent again.",
		}),
		upgrades: newUpgradeMetrics(),
	}
	// Known label values start at 0 so that a rate() or an alert sees the
	// series before its first event, not only after it.
	for _, reason := range retryReasons {
		m.retries.WithLabelValues(reason)
		m.budgetOut.WithLabelValues(reason)
	}
	// The duration's one kind, and the requests fanout answers itself
	// without an endpoint: 503 while no endpoint can be picked or while
	// shutting down. Every other fanout_requests_total series carries an
	// apiserver's code and endpoint, known only once it answers.
	m.shortDuration = m.duration.WithLabelValues(balancer.Short.String())
	for _, kind := range []balancer.Kind{balancer.Short, balancer.Long} {
		m.requestsFor(kind, http.StatusServiceUnavailable, "")
	}
	if reg != nil {
		for _, c := range append([]prometheus.Collector{m.requests, m.duration, m.retries, m.budgetOut, m.upstreamErrors, m.openLong, m.replayUsed, m.replayLimit, m.replayExhausted}, m.upgrades.collectors()...) {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// answered records a request's final status. code is what the proxy sent
// (or would have sent, for a client that went away).
func (m *Metrics) answered(kind balancer.Kind, code int, endpoint string, elapsed time.Duration) {
	m.requestsFor(kind, code, endpoint).Inc()
	if kind == balancer.Short {
		m.shortDuration.Observe(elapsed.Seconds())
	}
}

// requestsFor is m.requests.WithLabelValues(kind, code, endpoint), from
// the cache after the first time.
func (m *Metrics) requestsFor(kind balancer.Kind, code int, endpoint string) prometheus.Counter {
	k := answeredKey{kind, code, endpoint}
	m.seriesMu.RLock()
	c, ok := m.series[k]
	m.seriesMu.RUnlock()
	if ok {
		return c
	}
	c = m.requests.WithLabelValues(kind.String(), strconv.Itoa(code), endpoint)
	m.seriesMu.Lock()
	if m.series == nil {
		m.series = make(map[answeredKey]prometheus.Counter)
	}
	m.series[k] = c
	m.seriesMu.Unlock()
	return c
}

func (m *Metrics) upstreamError(endpoint string, err error) {
	m.upstreamErrors.WithLabelValues(endpoint, errorReason(err)).Inc()
}

// upstreamErrorReasons are every reason fanout_upstream_errors_total is
// counted by (errorReason).
var upstreamErrorReasons = []string{reasonUnprocessed, reasonTimeout, reasonCanceled, reasonOther}

// Retain follows the endpoint set, as the transports' pools do: the
// fanout_upstream_errors_total series of a new endpoint start at zero,
// one per reason, and those of an endpoint that left are dropped, so that
// endpoints that come and go (EndpointSlices, DNS) do not grow the series
// count forever. A counter that reappears starts again at zero, which
// Prometheus reads as a reset. It is called on every endpoint snapshot,
// never on the request path.
func (m *Metrics) Retain(addresses []string) {
	m.endpoints.Retain(addresses, func(a string) {
		for _, reason := range upstreamErrorReasons {
			m.upstreamErrors.WithLabelValues(a, reason)
		}
	}, func(a string) {
		m.upstreamErrors.DeletePartialMatch(prometheus.Labels{"endpoint": a})
	})
}

// retryReasons are every reason fanout_retries_total and
// fanout_retry_budget_exhausted_total are counted by.
var retryReasons = []string{reasonUnprocessed, reasonRead, reasonShutdown, reasonOverload, reasonThrottled, reasonGone, reasonUnauthorized, reasonSkew}

func (m *Metrics) retried(reason string) { m.retries.WithLabelValues(reason).Inc() }

func (m *Metrics) budgetExhausted(reason string) { m.budgetOut.WithLabelValues(reason).Inc() }

// errorReason buckets an upstream error. Unprocessed wins over the others:
// it is the one that says the request is safe to send again.
func errorReason(err error) string {
	switch {
	case transport.IsUnprocessed(err):
		return reasonUnprocessed
	case errors.Is(err, context.Canceled):
		return reasonCanceled
	case isTimeout(err):
		return reasonTimeout
	default:
		return reasonOther
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
