package proxy

import (
	"net/http"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
)

// The proxy's side of the cost table (Config.Cost): each request's
// outcome is gathered in its reqState as the attempt loop, the forwarder
// and the error handler learn it (the code, whether fanout answered
// itself, the retries, the bytes), and reported once the answer has
// ended; a long-running request also when it is answered, so that its
// open watch and its events show while it lasts. With no table, nothing
// is gathered beyond a few fields of the reqState.

// costAnswered records the status the client gets for the request in
// st: the apiserver's, or fanout's own code when failed (it got no
// answer). A long-running request is reported now.
func (h *Handler) costAnswered(header http.Header, st *reqState, code int, failed bool) {
	// The code is the log line's too (reqlog.go).
	st.outcome.Code, st.outcome.Failed = code, failed
	if h.cost == nil {
		return
	}
	if st.Kind == balancer.Long && !st.Upgrade && st.costRow == nil {
		st.costRow = h.cost.Open(&st.Info, userAgent(header), &st.outcome)
		st.openRetries = int32(st.outcome.Retries)
	}
}

// costEnded reports the end of the request in st, whose answer has ended;
// ua is its User-Agent.
func (h *Handler) costEnded(ua string, st *reqState) {
	if h.cost == nil {
		return
	}
	o := &st.outcome
	o.Elapsed = time.Since(st.Start)
	o.Received = st.received.Load()
	switch {
	case st.costRow != nil:
		// Retries made after the answer (a 410'd watch moved) count now.
		o.Retries -= int(st.openRetries)
		h.cost.Close(st.costRow, o)
	case st.Kind == balancer.Long || st.Upgrade:
		// Never reported as answered (an upgrade, or refused while
		// stopping): open and close at once, which counts no open watch
		// for a status other than 2xx.
		h.cost.Close(h.cost.Open(&st.Info, ua, o), o)
	default:
		h.cost.Short(&st.Info, ua, o)
	}
}

// userAgent is header's User-Agent, read without canonicalising the key.
func userAgent(header http.Header) string {
	if v := header["User-Agent"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// fanoutFailed tells whether code, fanout's own answer to an error, says
// it got no answer from any apiserver (failed, in the cost table's terms)
// rather than blaming the client.
func fanoutFailed(code int) bool {
	switch code {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// sentBytes is the request body's length as the forwarder sends it; 0
// when it streams through with an unknown length.
func sentBytes(b *outBody) int64 {
	if b.buf != nil {
		return int64(len(b.buf))
	}
	return max(b.length, 0)
}
