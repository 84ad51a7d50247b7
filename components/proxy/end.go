package proxy

import (
	"net/http"

	"github.com/fanout-dev/fanout/internal/h1server"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// A request's end is one place for every part of the request path: its
// reqinfo.Request runs each part's Ender once, whichever goroutine sees the
// end (the handler's when it returns or panics, a detached HTTP/1.1
// stream's, the library caller's reading the answer). The listener's limits
// give back their slot there; the proxy's state (RequestEnded) gives back
// what the proxy holds, as its ServeHTTP or RoundTripper marked (atEnd).
// The balancer hears of each pick when its answer's body ends
// (doneBody.finish), which is before or at the request's end.

// endWork is what a request's end does besides giving back the replay
// budget.
type endWork uint8

const (
	endOpenLong endWork = 1 << iota // fanout_open_long_running_requests counted it
	endCost                         // report to the cost table (cost.go)
	endLog                          // write the line per request (reqlog.go)
)

var _ reqinfo.Ender = (*reqState)(nil)

// reportAtEnd marks work for the end of the request r, whose state is st,
// keeping what the cost table and the log line need of r.
func (st *reqState) reportAtEnd(r *http.Request, work endWork) {
	if work&(endCost|endLog) != 0 && (st.h.cost != nil || st.h.logsRequests()) {
		st.ua, st.method, st.url = userAgent(r.Header), r.Method, r.URL
	}
	st.atEnd |= work
}

// RequestEnded implements reqinfo.Ender: the one place the proxy gives
// back what it holds for a request.
func (st *reqState) RequestEnded(*reqinfo.Request) {
	h := st.h
	if st.atEnd&endOpenLong != 0 {
		h.metrics.openLong.Dec()
	}
	if st.atEnd&endCost != 0 {
		h.costEnded(st.ua, st)
	}
	if st.atEnd&endLog != 0 && st.url != nil {
		h.logEnded(st.method, st.url, st.ua, st)
	}
	h.releaseReplay(st)
}

// callerBody is the library caller's request, whose body the
// RoundTripper closes when the request ends, as http.RoundTripper
// requires.
type callerBody http.Request

// RequestEnded implements reqinfo.Ender.
func (c *callerBody) RequestEnded(*reqinfo.Request) { closeRequestBody((*http.Request)(c)) }

// endRequest ends req, which ServeHTTP made (a request served without
// the listener's edge, which does the same), once the handler returned or
// panicked having answered on w: now, or when the stream of an answer the
// server took over ends (h1stream.go).
func endRequest(w http.ResponseWriter, req *reqinfo.Request) {
	if h1server.Detached(w) {
		h1server.OnStreamEnd(w, req.End)
		return
	}
	req.End()
}
