package listener

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
	"github.com/fanout-dev/fanout/internal/kstatus"
	"github.com/fanout-dev/fanout/internal/reqinfo"
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
func withLimits(next http.Handler, maxShort, maxLong int, bodyTimeout time.Duration, m *Metrics) *limits {
	l := &limits{next: next, maxShort: int64(maxShort), maxLong: int64(maxLong), bodyTimeout: bodyTimeout, m: m}
	l.short.gauge = m.inflight.WithLabelValues(balancer.Short.String())
	l.long.gauge = m.inflight.WithLabelValues(balancer.Long.String())
	return l
}

// limits is the handler withLimits returns. The edge (withRequestInfo)
// calls serve with the request it made.
type limits struct {
	next              http.Handler
	short, long       slots
	maxShort, maxLong int64
	bodyTimeout       time.Duration
	m                 *Metrics
}

// slots is one budget's count and gauge. A request that took a slot
// registers its budget's slots with its reqinfo.Request, which gives the
// slot back when the request ends (RequestEnded): when its handler
// returned, or the stream of a detached HTTP/1.1 answer ended.
type slots struct {
	n     atomic.Int64
	gauge prometheus.Gauge
}

// RequestEnded implements reqinfo.Ender.
func (s *slots) RequestEnded(*reqinfo.Request) {
	s.n.Add(-1)
	s.gauge.Dec()
}

// limitedHandler is what the edge hands a classified request to.
type limitedHandler interface {
	serve(w http.ResponseWriter, r *http.Request, req *reqinfo.Request)
}

// limitKind is the budget a request counts against: every real upgrade
// is long-running whatever its path (it holds a connection for as long
// as the session lasts), everything else goes by whether kube-apiserver
// treats its path as long-running.
func limitKind(info *reqinfo.Info) balancer.Kind {
	if info.Upgrade || info.LongRunning {
		return balancer.Long
	}
	return balancer.Short
}

func (l *limits) serve(w http.ResponseWriter, r *http.Request, req *reqinfo.Request) {
	kind := limitKind(&req.Info)
	s, limit := &l.short, l.maxShort
	if kind == balancer.Long {
		s, limit = &l.long, l.maxLong
	}
	if s.n.Add(1) > limit {
		s.n.Add(-1)
		l.reject(w, kind, limit)
		return
	}
	s.gauge.Inc()
	// The slot goes back when the request ends (endRequest), the edge's
	// one end for everything the request holds.
	req.OnEnd(s)
	if !req.Upgrade && l.bodyTimeout > 0 && hasBody(r) && l.serveBodyDeadline(w, r) {
		return
	}
	// A watch stays parked below this frame for its life: what is done
	// only for some requests is in the functions above, off its stack
	// (cmd/fanout's TestFootprintPerWatch).
	l.next.ServeHTTP(w, r)
}

// reject answers a request over its kind's limit 429.
func (l *limits) reject(w http.ResponseWriter, kind balancer.Kind, limit int64) {
	reason := rejectShort
	if kind == balancer.Long {
		reason = rejectLong
	}
	l.m.rejected.WithLabelValues(reason).Inc()
	w.Header().Set("Retry-After", limitsRetryAfterS)
	kstatus.Write(w, http.StatusTooManyRequests, kstatus.ReasonTooManyRequests,
		limitsRejectPrefix+kind.String()+" requests in flight (at most "+strconv.FormatInt(limit, 10)+
			"; see --max-inflight and --max-long-running); retry after "+limitsRetryAfterS+"s")
}

// serveBodyDeadline serves a request whose body must arrive within
// bodyTimeout, and says false, having served nothing, when the connection
// takes no read deadline.
func (l *limits) serveBodyDeadline(w http.ResponseWriter, r *http.Request) bool {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(l.bodyTimeout)); err != nil {
		return false
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc, rejected: l.m.rejected.WithLabelValues(rejectBodyTimeout), left: r.ContentLength}
	r.Body = b
	l.next.ServeHTTP(w, r)
	if b.timedOut {
		// The request is broken and the reverse proxy may have
		// answered nothing (it takes the failed read for a client
		// that went away), which net/http would send as an empty
		// 200. Abort: the connection (HTTP/1.1) or stream (HTTP/2)
		// is reset instead.
		panic(http.ErrAbortHandler)
	}
	return true
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
