package proxy

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/h1server"
)

// Reasons of fanout_rejected_total: which downstream limit refused what.
const (
	rejectConnections = "connections"    // --max-connections: a connection closed at accept
	rejectShort       = "short_inflight" // --max-inflight: a short request answered 429
	rejectLong        = "long_inflight"  // --max-long-running: a watch/exec/logs answered 429
	rejectBodyTimeout = "body_timeout"   // --request-body-timeout: a body not sent in time
)

const (
	limitsRetryAfterS  = "1"
	limitsRejectPrefix = "fanout: too many "
)

// limitMetrics are the collectors of the downstream limits. Labels are
// bounded: reason is one of the reject* constants.
type limitMetrics struct {
	rejected    *prometheus.CounterVec
	connections prometheus.Gauge
	inflight    *prometheus.GaugeVec
}

func newLimitMetrics() limitMetrics {
	m := limitMetrics{
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
	}
	for _, r := range []string{rejectConnections, rejectShort, rejectLong, rejectBodyTimeout} {
		m.rejected.WithLabelValues(r)
	}
	return m
}

func (m limitMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.rejected, m.connections, m.inflight}
}

// withLimits caps concurrent requests with two budgets, short and
// long-running, so that a client holding many watches still gets its GETs
// and LISTs served, and a flood of short requests cannot stop watches from
// being re-established. Over a budget the answer is 429 with Retry-After,
// which client-go retries by itself. The counters are atomics: no lock on
// the request path.
//
// Requests with a body must send it within bodyTimeout (0: no limit),
// long-running ones too: a watch has nothing to send, and a proxy request
// is buffered for retries like any other, so a body that never comes
// would otherwise hold a --max-long-running slot for good. Upgrades are
// exempt: exec and port-forward stream their input over the hijacked
// connection for as long as they run.
func withLimits(next http.Handler, maxShort, maxLong int, bodyTimeout time.Duration, now func() time.Time, m limitMetrics) http.Handler {
	var short, long atomic.Int64
	shortGauge := m.inflight.WithLabelValues(balancer.Short.String())
	longGauge := m.inflight.WithLabelValues(balancer.Long.String())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, _ := stateOf(r, now)
		kind, upgrade := st.LimitKind(), st.Upgrade
		counter, limit, gauge, reason := &short, int64(maxShort), shortGauge, rejectShort
		if kind == balancer.Long {
			counter, limit, gauge, reason = &long, int64(maxLong), longGauge, rejectLong
		}
		if counter.Add(1) > limit {
			counter.Add(-1)
			m.rejected.WithLabelValues(reason).Inc()
			w.Header().Set("Retry-After", limitsRetryAfterS)
			writeStatus(w, http.StatusTooManyRequests, statusReasonTooManyRequests,
				limitsRejectPrefix+kind.String()+" requests in flight (at most "+strconv.FormatInt(limit, 10)+
					"; see --max-inflight and --max-long-running); retry after "+limitsRetryAfterS+"s")
			return
		}
		gauge.Inc()
		defer func() {
			// A detached HTTP/1.1 watch outlives its handler
			// (h1stream.go): it holds the slot until it ends.
			if h1server.Detached(w) {
				h1server.OnStreamEnd(w, func() {
					counter.Add(-1)
					gauge.Dec()
				})
				return
			}
			counter.Add(-1)
			gauge.Dec()
		}()
		if !upgrade && bodyTimeout > 0 && hasBody(r) {
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(now().Add(bodyTimeout)); err == nil {
				b := &deadlineBody{ReadCloser: r.Body, rc: rc, rejected: m.rejected.WithLabelValues(rejectBodyTimeout), left: r.ContentLength}
				r.Body = b
				next.ServeHTTP(w, r)
				if b.timedOut {
					// The request is broken and the reverse proxy may have
					// answered nothing (it takes the failed read for a client
					// that went away), which net/http would send as an empty
					// 200. Abort: the connection (HTTP/1.1) or stream (HTTP/2)
					// is reset instead.
					panic(http.ErrAbortHandler)
				}
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// deadlineBody counts a body that missed its deadline, and lifts the
// deadline once the body is in. net/http already makes a late deadline
// harmless (HTTP/1.1 clears it when it starts its background read at the
// end of the body; an ended HTTP/2 body ignores it), so the lift only keeps
// the deadline about the body whatever the server does afterwards.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	rejected prometheus.Counter
	// Read runs on one goroutine at a time, and ServeHTTP reads timedOut
	// only after the handler returned.
	done     bool
	timedOut bool
	left     int64 // bytes of a declared length still to come; <0 when unknown
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.done {
		return n, err
	}
	b.left -= int64(n)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done, b.timedOut = true, true
		b.rejected.Inc()
	case err != nil || b.left == 0:
		// The end of the body, or all of a declared length (io.ReadFull
		// stops there without asking for io.EOF).
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
