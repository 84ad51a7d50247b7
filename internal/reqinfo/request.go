package reqinfo

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// Request is one request's state from the edge that classified it to its
// end, carried in the request's context as kube-apiserver's
// request.WithRequestInfo carries its RequestInfo: whoever serves the
// request first makes it (WithRequest), once, and everything behind reads
// it (RequestFrom) instead of classifying again.
//
// It is also the one place where a request's end is told: what a part
// holds for the request (a limit slot, a gauge, a cost row, the replay
// budget) is released by the Ender it registered (OnEnd), which End runs
// exactly once, however the request ended and whichever goroutine saw it
// end. Whoever made the Request calls End: when its handler returned, or,
// for an answer the server streams on by itself after the handler returned
// (internal/h1server's Detach), when that stream ends.
type Request struct {
	// Info is the request's one classification (New).
	Info
	// Start is when the request arrived.
	Start time.Time

	// handler is the state of the handler serving the request
	// (SetHandlerState), kept here so that it needs no context of its own.
	handler any
	// enders are run by End, the last registered first (as deferred
	// calls are). They are registered on the request's goroutine before
	// its end can come; End may run on another.
	enders [maxEnders]Ender
	n      uint8
	ended  atomic.Bool
}

// maxEnders is how many parts may register an Ender: the listener's
// limits and the proxy's state (the library: the proxy's state and the
// caller's body). Two keep a request's context in the 192-byte size class.
const maxEnders = 2

// Ender is what a part of the request path registers with a Request to
// release what it holds for it (OnEnd).
type Ender interface {
	// RequestEnded releases what the part holds for the request that
	// ended; it is called once.
	RequestEnded(*Request)
}

// OnEnd registers e to run when the request ends (End). It is called on
// the request's goroutine, before the request is handed on to whatever may
// end it on another; at most maxEnders parts register.
func (r *Request) OnEnd(e Ender) {
	if int(r.n) == len(r.enders) {
		panic("reqinfo: more Enders registered for one request than maxEnders")
	}
	r.enders[r.n] = e
	r.n++
}

// End runs the registered Enders, the last registered first, and only
// the first time it is called: every part that sees the request end may
// call it, and what was held is released once.
func (r *Request) End() {
	if !r.ended.CompareAndSwap(false, true) {
		return
	}
	for i := int(r.n) - 1; i >= 0; i-- {
		r.enders[i].RequestEnded(r)
		r.enders[i] = nil
	}
}

// Ended tells whether End has run.
func (r *Request) Ended() bool { return r.ended.Load() }

// SetHandlerState hangs the handler's own state for the request on it, so
// that the handler's later stages (its RoundTripper, its error handler)
// find it in the request's context with no context of their own. It is
// called once, on the request's goroutine, before the request goes on.
func (r *Request) SetHandlerState(v any) { r.handler = v }

// HandlerState is what SetHandlerState hung on the request, nil if
// nothing.
func (r *Request) HandlerState() any { return r.handler }

type requestKey struct{}

// requestCtx is a context carrying a Request: one allocation where
// context.WithValue and a separate Request would be two. It answers
// Value(requestKey{}) as context.WithValue would, and leaves everything
// else (deadline, cancellation, other values) to the context it wraps.
type requestCtx struct {
	context.Context
	req Request
}

func (c *requestCtx) Value(key any) any {
	if _, ok := key.(requestKey); ok {
		return &c.req
	}
	return c.Context.Value(key)
}

// WithRequest returns ctx carrying a new Request for a request classified
// as info that arrived at start, and that Request. The caller ends it
// (Request.End).
func WithRequest(ctx context.Context, info Info, start time.Time) (context.Context, *Request) {
	c := &requestCtx{Context: ctx}
	c.req.Info, c.req.Start = info, start
	return c, &c.req
}

// Classify is r classified (New) on a copy of r whose context carries
// the Request (WithRequest), which arrived at start; the caller ends it.
// The edge calls it once per request, and so does the proxy for a request
// that reached it without the edge. It is its own function so that Info's
// temporaries live in its frame, which returns, and not in the frames that
// stay on a watch's stack for its life (cmd/fanout's
// TestFootprintPerWatch).
//
//go:noinline
func Classify(r *http.Request, start time.Time) (*http.Request, *Request) {
	ctx, req := WithRequest(r.Context(), New(r), start)
	return r.WithContext(ctx), req
}

// RequestFrom is the Request ctx carries (WithRequest), nil if none.
func RequestFrom(ctx context.Context) *Request {
	r, _ := ctx.Value(requestKey{}).(*Request)
	return r
}
