package watch

import (
	"io"
	"net/http"
	"sync/atomic"

	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Hook is the forwarder's one entry into the watch features: Prepare
// before a long-running request is sent, Track on its response. The 410
// retry is always on; rebalancing is on when the Hook was made with a
// Rebalancer. The zero value (no rebalancing) is ready to use, and every
// method is safe for concurrent use.
type Hook struct {
	rebalancer *Rebalancer
}

// NewHook returns the Hook that hands watches to r; a nil r leaves watch
// bodies unwrapped.
func NewHook(r *Rebalancer) Hook { return Hook{rebalancer: r} }

// Prepare lets the rebalancer see a WatchList's events: kube-apiserver
// gzips WatchList streams (WatchListCompression) when the request accepts
// gzip, which client-go's does. Without the client's Accept-Encoding the
// HTTP/2 transport asks for gzip itself and decompresses, so the upstream
// link stays compressed and the client gets the same events, uncompressed
// over loopback. Plain watches are never compressed and are left alone.
// out is the forwarder's own copy of the request, info its classification.
func (h *Hook) Prepare(out *http.Request, info *reqinfo.Info) {
	if h.rebalancer == nil || !info.LongRunning || out.URL.Query().Get("sendInitialEvents") != "true" {
		return
	}
	out.Header.Del("Accept-Encoding")
}

// Resend sends the watch that endpoint from answered with a 410 once
// more, to the endpoint that has been usable longest; the proxy's attempt
// policy makes that attempt. It returns the new response, whose status is
// 200 and whose body reports to the balancer when it ends, and the
// endpoint that sent it; or an error when there is no such endpoint or it
// did not answer 200, and the client then gets the 410.
type Resend func(from string) (resp *http.Response, endpoint string, err error)

// Track returns the body of resp, the answer of endpoint to the
// long-running request out classified as info, wrapped for the watch
// features: if out is a watch, the rebalancer may end it between two
// events (and send, with out's credentials, a freshness request to the
// endpoint it is on), and a first event that is a 410 from kube-apiserver (not a
// relayed one) is replaced by resend's answer when there is one. events,
// when not nil, counts the events passed on; only the rebalancer follows
// the events, so without one nothing is counted.
func (h *Hook) Track(out *http.Request, resp *http.Response, info *reqinfo.Info, endpoint string, resend Resend, send Send, events *atomic.Int64) io.ReadCloser {
	body := h.track(out, resp, info, endpoint, send, events)
	if info.Origin.Relayed() {
		return body
	}
	f, ok := goneCandidate(out, resp)
	if !ok {
		return body
	}
	return newGoneRetryBody(body, f, func() (io.ReadCloser, error) {
		next, addr, err := resend(endpoint)
		if err != nil {
			return nil, err
		}
		return h.track(out, next, info, addr, send, events), nil
	})
}

// track hands a long-running response to the rebalancer, if any.
func (h *Hook) track(out *http.Request, resp *http.Response, info *reqinfo.Info, endpoint string, send Send, events *atomic.Int64) io.ReadCloser {
	r := h.rebalancer
	if r == nil || !info.LongRunning {
		return resp.Body
	}
	return r.track(out, resp, info, endpoint, send, events)
}
