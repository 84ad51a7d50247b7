package proxy

import (
	"net/http"
	"time"
)

// Discovery answers discovery requests itself while the endpoints serve
// different APIs (components/apis: the union of their discovery);
// *apis.Discoverer is one.
type Discovery interface {
	// Answer returns the answer to req, or nil to send req to an
	// apiserver. It is called for every request, concurrently, and must
	// be cheap when it returns nil.
	Answer(req *http.Request) *http.Response
}

// answerDiscovery returns the Discovery's own answer to out, counted as
// a request answered without an endpoint, or nil.
func (h *Handler) answerDiscovery(out *http.Request, st *reqState) *http.Response {
	if h.discovery == nil {
		return nil
	}
	resp := h.discovery.Answer(out)
	if resp != nil {
		h.metrics.answered(st.Kind, resp.StatusCode, "", time.Since(st.Start))
		h.costAnswered(out.Header, st, resp.StatusCode, false)
	}
	return resp
}
