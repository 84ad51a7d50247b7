package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/components/watch"
	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Picker chooses the endpoint for a request. It is satisfied by
// *balancer.Balancer. Pick is called concurrently from every request and
// must not block; the proxy calls the returned Done exactly once.
type Picker interface {
	Pick(balancer.PickInfo) (balancer.Pick, error)
}

// Upstream hands out the RoundTripper for one endpoint and credential mode.
// It is satisfied by *transport.Transports. For is called concurrently on
// every attempt, so it must be cheap (a lookup, not a dial). A RoundTripper
// reports failures that happened before the apiserver received the request
// as *transport.UnprocessedError; those are the only ones retried.
type Upstream interface {
	For(address string, mode transport.AuthMode) http.RoundTripper
}

var (
	_ http.Handler = (*Handler)(nil)
	_ Picker       = (*balancer.Balancer)(nil)
	_ Upstream     = (*transport.Transports)(nil)

	_ watch.RebalanceEnder = (*doneBody)(nil)
)

// Handler proxies loopback requests to kube-apiserver. Create it with New.
// It is safe for concurrent use.
type Handler struct {
	picker   Picker
	upstream Upstream
	metrics  *Metrics
	maxBody  int64
	proxy    *httputil.ReverseProxy
	// longProxy is proxy with small copy buffers, for long-running
	// responses: a watch holds its copy buffer for as long as it is open.
	longProxy *httputil.ReverseProxy
	// budget caps retries to other endpoints (see retryBudget).
	budget *retryBudget
	// replay bounds the bodies kept for retries, all requests together
	// (replaybudget.go).
	replay *budget.Bytes

	// stopping refuses new requests once StopLongRunning ran, which
	// then ends every open long-running response in longBodies; keeping
	// them in a list of its own costs a response no goroutine and, unlike
	// a context.AfterFunc on a shared context, no allocation while it runs.
	stopping   atomic.Bool
	longBodies bodySet

	// upgrader dials the connections of upgrade requests; nil answers
	// them 501 (Config.Upgrades).
	upgrader UpgradeDialer
	// upgrades tracks upgraded connections, which StopLongRunning leaves
	// alone (upgrade.go).
	upgrades upgradeSet
	// watch is the hook into the watch features (package watch):
	// rebalancing and the 410 retry.
	watch watch.Hook
	// sends are the watch.Send of each transport.AuthMode: how the watch
	// features send a request of their own with a watch's credentials.
	sends [2]watch.Send
	// cost is told what each request cost (cost.go); nil is off.
	cost CostTable
	// discovery answers discovery requests while the endpoints differ
	// (discovery.go); nil sends them all on.
	discovery Discovery
	// log takes the line per request at logging.LevelRequest (reqlog.go).
	log *slog.Logger
	// endpointHeader names the answering endpoint on each answer
	// (Config.EndpointHeader).
	endpointHeader bool
}

// New builds the Handler. m may be nil for unregistered metrics.
func New(cfg Config, p Picker, u Upstream, m *Metrics) *Handler {
	cfg = cfg.withDefaults()
	if m == nil {
		m, _ = NewMetrics(nil) // cannot fail without a registry
	}
	h := &Handler{
		picker:         p,
		upstream:       u,
		metrics:        m,
		endpointHeader: cfg.EndpointHeader,
		maxBody:        cfg.MaxReplayBody,
		upgrader:       cfg.Upgrades,
		watch:          watch.NewHook(cfg.Rebalancer),
		cost:           cfg.Cost,
		log:            cfg.Log,
		budget:         newRetryBudget(cfg.RetryBudget.Ratio, cfg.RetryBudget.Min, cfg.RetryBudget.Window),
	}
	h.discovery = cfg.Discovery
	h.replay = budget.New(cfg.ReplayBudget, m.replayUsed, m.replayExhausted)
	m.replayLimit.Set(float64(cfg.ReplayBudget))
	for _, mode := range []transport.AuthMode{transport.AuthSidecar, transport.AuthPassthrough} {
		h.sends[mode] = func(req *http.Request, endpoint string) (*http.Response, error) {
			return h.upstream.For(endpoint, mode).RoundTrip(req)
		}
	}
	h.proxy = &httputil.ReverseProxy{
		// Rewrite, not Director: it strips Forwarded/X-Forwarded-* from the
		// client and adds none. kube-apiserver would record 127.0.0.1 as the
		// audit source IP of an X-Forwarded-For, and trusts nothing from us
		// about the client anyway. User-Agent and Impersonate-* pass as
		// is; front-proxy identity headers do not (headers.go).
		Rewrite: func(pr *httputil.ProxyRequest) {
			stripIdentityHeaders(pr.Out.Header)
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = "" // set per attempt to the picked endpoint
			// An empty Host makes the transport use URL.Host; the TLS
			// server name is the transport's business.
			pr.Out.Host = ""
		},
		Transport: (*forwarder)(h),
		// A short response with a Content-Length is of use to the client
		// only whole, so its writes are left to the server's buffer: a
		// FlushInterval other than 0 costs a timer, a latency writer and
		// a flush per write (five allocations per request). Chunked lists
		// still reach the client chunk by chunk: the reverse proxy
		// flushes every write of a response without a length (and of
		// text/event-stream) whatever FlushInterval says.
		FlushInterval: 0,
		ErrorHandler:  h.handleError,
		// The reverse proxy logs a stream that breaks mid-body. That is
		// one line per failed request, and fanout_upstream_errors_total
		// already counts it, so it goes to the debug level (-v 1).
		ErrorLog:   slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
		BufferPool: newAnswerBuffers(cfg.AnswerBudget),
	}
	long := *h.proxy
	long.BufferPool = longCopyBuffers
	// Watches must reach the client event by event, lengths or not.
	long.FlushInterval = -1
	h.longProxy = &long
	return h
}

// ServeHTTP implements http.Handler. It serves a request whose context
// carries its reqinfo.Request (the listener's edge makes it), or makes one
// itself, as the edge would have, and then ends it too.
//
// What the proxy holds for the request (the open long-running gauge, the
// cost row, the log line, the replay budget) is released by its state's
// RequestEnded (end.go), which the request's one End runs: when the
// handler returned, or panicked (the reverse proxy's http.ErrAbortHandler),
// or when the stream of a detached HTTP/1.1 answer ended.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := reqinfo.RequestFrom(r.Context())
	if req == nil {
		// Served without the listener's edge: classify here, once, as
		// the edge would have, and end the request here too.
		r, req = reqinfo.Classify(r, time.Now())
		defer endRequest(w, req)
	}
	st := h.newState(req)
	if h.stopping.Load() {
		h.refuseStopping(w, r, st)
		return
	}
	if st.H2COffer {
		r = declineH2C(r)
	}
	if st.Upgrade {
		// An Upgrade cannot ride the HTTP/2 upstream connections; it gets
		// its own HTTP/1.1 connection (upgrade.go).
		h.serveUpgrade(w, r, st)
		// An upgrade is not the cost table's (cost.go): only its line.
		st.reportAtEnd(r, endLog)
		return
	}
	if st.Kind == balancer.Long {
		h.serveLong(w, r, st)
		return
	}
	h.proxy.ServeHTTP(w, r)
	// Not reported when the reverse proxy panicked, as before the end
	// was one.
	st.reportAtEnd(r, endCost|endLog)
}

// refuseStopping answers a request that came after StopLongRunning 503.
// This and declineH2C are functions of their own, as what is done only
// for some requests should be: a watch stays parked below ServeHTTP's
// frame for its life (cmd/fanout's TestFootprintPerWatch).
func (h *Handler) refuseStopping(w http.ResponseWriter, r *http.Request, st *reqState) {
	h.metrics.answered(st.Kind, http.StatusServiceUnavailable, "", time.Since(st.Start))
	writeStatus(w, http.StatusServiceUnavailable, statusReasonServiceUnavailable,
		"fanout is shutting down and accepts no new requests; retry against the restarted sidecar")
	st.outcome.Code, st.outcome.Failed = http.StatusServiceUnavailable, true
	st.reportAtEnd(r, endCost|endLog)
}

// declineH2C is r without an HTTP/1.1 client's offer to switch to h2c
// (curl --http2 on http://). The offer is optional: decline it by serving
// the request as plain HTTP/1.1 (h2c is served with prior knowledge).
func declineH2C(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	for _, k := range []string{"Connection", "Upgrade", "HTTP2-Settings"} {
		r.Header.Del(k)
	}
	return r
}

func (h *Handler) serveLong(w http.ResponseWriter, r *http.Request, st *reqState) {
	h.metrics.openLong.Inc()
	// Counted until the request's end, which a detached answer's stream
	// tells (h1stream.go).
	st.reportAtEnd(r, endOpenLong|endCost|endLog)
	fw := newFlushWriter(w, longCopyBuffer) // copybuf.go
	defer fw.stop()
	w = fw
	if mayTakeOver(r, true, st.Upgrade) {
		// An HTTP/1.1 watch: the server may stream its answer by itself
		// once the headers are in (h1stream.go), and then the gauge
		// counts it until the stream ends.
		s := &h1Stream{w: fw, h: h}
		st.stream = s
		w = s
		defer s.handlerDone()
	}
	h.longProxy.ServeHTTP(w, r)
}

// StopLongRunning ends every open long-running response cleanly: its body
// reports io.EOF, so the reverse proxy finishes the chunked stream normally
// and client-go re-establishes the watch elsewhere instead of seeing an
// error. Requests arriving afterwards get 503. Short requests in flight are
// left alone; the server's Shutdown waits for them. It is idempotent and
// safe to call concurrently.
func (h *Handler) StopLongRunning() {
	h.stopping.Store(true)
	h.longBodies.stopAll()
}

// reqState is the proxy's state of one request, hung on its
// reqinfo.Request (which the listener's edge put in its context) by
// ServeHTTP or the RoundTripper, and read from there by the reverse
// proxy's RoundTrip and handleError. It holds what the request's one
// classification means to the balancer and the transport, and what the
// forwarder learns on the way. All of them run on the request's
// goroutine, so it needs no lock; its end (RequestEnded, end.go) may run
// on another.
type reqState struct {
	// Request is the request's classification (Info), start (Start) and
	// end (End).
	*reqinfo.Request
	// The small fields together, so that a short request's state and
	// its first attempt fit one 768-byte size class (shortState).
	classified
	atEnd    endWork // what the request's end does (end.go)
	bodyUsed bool    // body is taken
	// firstFree says the state is a shortState whose first attempt's
	// request is still unused (outBody.request).
	firstFree bool
	// end is how a long-running answer's body ended (an endReason), set
	// by its doneBody, perhaps on another goroutine (the rebalancer's).
	end      atomic.Uint32
	attempts int32 // attempts made: sends to an endpoint, retries included
	h        *Handler
	endpoint string // last endpoint tried, "" before the first pick

	// body is the response body wrapper (watchBody) of the request's
	// first answer, kept here to save it an allocation: a short
	// request's body lives no longer than the request, and a
	// long-running one's no longer than this state, which the upstream
	// stream keeps through the request's context.
	body doneBody

	// stream, when not nil, may have the server stream the answer by
	// itself once the response headers are in: an HTTP/1.1 long-running
	// GET (h1stream.go).
	stream *h1Stream

	// What the request cost, for the cost table (cost.go). received is
	// added to by the answer's body, which a detached stream reads on a
	// goroutine of the server's.
	outcome  cost.Outcome
	received atomic.Int64
	// costRow is a long-running request's row from its answer on;
	// openRetries the retries counted then.
	costRow     *cost.Row
	openRetries int32

	// replayHeld is what the request's body buffer took from the replay
	// budget, given back once when the request ends (releaseReplay).
	// Atomic: the library's RoundTripper may end a request on the
	// goroutine that reads its answer.
	replayHeld atomic.Int64

	// What the request's end (atEnd, end.go) needs of the client's
	// request, kept rather than the request and its headers (a KiB per
	// HTTP/1.1 watch, TestFootprintPerWatch).
	ua     string
	method string
	url    *url.URL
}

// shortState is a short request's state with room for its first
// attempt's request: one allocation where two would be, in the 768-byte
// size class with the allocator's header (reqState grown by 8 bytes or
// attemptRequest by any would take it to 896). st comes first: a
// *reqState with firstFree set is a *shortState.
type shortState struct {
	st    reqState
	first attemptRequest
}

// newState makes the proxy's state of req, hangs it on req, and registers
// its end with req's.
func (h *Handler) newState(req *reqinfo.Request) *reqState {
	cl := classify(req.Info)
	var st *reqState
	if cl.Kind == balancer.Long {
		// Without room for an attempt: the state lives as long as the
		// watch, the attempt's request need not.
		st = new(reqState)
	} else {
		st = &new(shortState).st
		st.firstFree = true
	}
	st.Request, st.classified, st.h = req, cl, h
	req.SetHandlerState(st)
	req.OnEnd(st)
	return st
}

func stateFrom(ctx context.Context) *reqState {
	st, _ := stateOf(ctx)
	return st
}

// stateOf is stateFrom, also reporting whether ctx carried the state: a
// state it had to make up belongs to no request that ServeHTTP or the
// RoundTripper will end.
func stateOf(ctx context.Context) (*reqState, bool) {
	if req := reqinfo.RequestFrom(ctx); req != nil {
		if st, ok := req.HandlerState().(*reqState); ok {
			return st, true
		}
	}
	// Only when RoundTrip is called outside ServeHTTP.
	return &reqState{Request: new(reqinfo.Request)}, false
}

// forwarder is the reverse proxy's Transport: it runs the attempt policy
// (attempt.go) and wraps the body of the answer it returns.
type forwarder Handler

func (f *forwarder) RoundTrip(out *http.Request) (*http.Response, error) {
	h := (*Handler)(f)
	st, owned := stateOf(out.Context())
	if !owned {
		// No one else ends this request: its budget goes back once the
		// attempts are over (the body is not sent again after that).
		defer h.releaseReplay(st)
	}
	if resp := h.answerDiscovery(out, st); resp != nil {
		return resp, nil
	}

	body, err := h.prepareBody(out, st)
	if err != nil {
		return nil, err
	}
	st.outcome.Sent = sentBytes(&body)
	if st.Kind == balancer.Long {
		h.watch.Prepare(out, &st.Info)
	}
	a := h.newAttempts(out, st, body)
	ans, err := a.run()
	if err != nil {
		return nil, err
	}
	resp := ans.resp
	h.metrics.answered(st.Kind, resp.StatusCode, ans.addr, ans.headers.Sub(st.Start))
	h.costAnswered(out.Header, st, resp.StatusCode, false)
	if h.endpointHeader {
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		setEndpointHeaders(resp.Header, st)
	}
	if ans.pick.Endpoint == nil {
		return resp, nil // a held rejection: the balancer heard of it
	}
	var into *doneBody
	if !st.bodyUsed {
		into, st.bodyUsed = &st.body, true
	}
	resp.Body = h.watchBody(into, resp.Body, st, ans.pick, ans.info)
	if st.Kind == balancer.Long {
		forgetRequest(resp)
		// A 410 retry continues this request's attempts, on its
		// goroutine, once the response is already the client's; a copy
		// on the heap keeps the short path's on the stack.
		more := new(attempts)
		*more = a
		resp.Body = h.watch.Track(out, resp, &st.Info, ans.addr, more.retryGone, h.sends[st.Mode], st.costRow.Events())
		if s := st.stream; s != nil {
			// The reverse proxy reads the body through the stream, which
			// hands it to a goroutine of its own if it takes over.
			s.body = resp.Body
			resp.Body = s
		}
	}
	return resp, nil
}

// forgetRequest drops resp's link to the request sent, for a response
// that stays open (a watch): the HTTP/2 transport keeps the response
// (through its Trailer) until the stream ends, and with it resp.Request,
// the transport's own copy of the attempt's request and the contexts it
// added. Nothing after the round trip reads it.
func forgetRequest(resp *http.Response) { resp.Request = nil }

// outBody is the request body as the forwarder sends it.
type outBody struct {
	buf        []byte    // the whole body, when it was small enough to keep
	stream     io.Reader // the body to stream once, when it was not
	length     int64
	replayable bool
}

// prepareBody reads bodies up to maxBody into memory so an unprocessed
// request can be sent again; anything larger streams through once, so memory
// stays bounded by maxBody per request, by what the client actually sent
// (readBody), and by the replay budget for all requests together. What the
// buffer takes from the budget is recorded in st and given back when the
// request ends (releaseReplay). A body that finds the budget spent streams
// through once, the part already read first, and is not replayable: no
// path sends such a request again (attempts.mayRetry).
func (h *Handler) prepareBody(out *http.Request, st *reqState) (outBody, error) {
	if out.Body == nil || out.Body == http.NoBody {
		return outBody{replayable: true}, nil
	}
	n := out.ContentLength
	switch {
	case n == 0:
		return outBody{replayable: true}, nil
	case n > h.maxBody || h.maxBody == 0:
		return outBody{stream: out.Body, length: n}, nil
	}
	// A declared length within maxBody, or an unknown one (chunked): for
	// the latter, read one byte past the limit to learn which side of it
	// the body is on.
	limit := n
	if n < 0 {
		limit = h.maxBody + 1
	}
	buf, err := readBody(out.Body, limit, func(k int64) bool {
		if !h.replay.Take(k) {
			return false
		}
		st.replayHeld.Add(k)
		return true
	})
	switch {
	case err == errBudgetSpent:
		// Counted by the budget (fanout_replay_budget_exhausted_total).
	case err == io.EOF && n > 0:
		return outBody{}, &clientBodyError{err: io.ErrUnexpectedEOF}
	case err != nil && err != io.EOF:
		return outBody{}, &clientBodyError{err: err}
	case int64(len(buf)) <= h.maxBody:
		return outBody{buf: buf, length: int64(len(buf)), replayable: true}, nil
	}
	// Over the budget, or a chunked body over maxBody: what was read goes
	// first, the rest streams once.
	if len(buf) == 0 {
		return outBody{stream: out.Body, length: n}, nil
	}
	return outBody{stream: io.MultiReader(bytes.NewReader(buf), out.Body), length: n}, nil
}

// firstBodyChunk is the buffer a declared body starts with. Most
// kube-apiserver writes (leases, events, status updates) fit in it, so
// they cost one allocation of their exact size.
const firstBodyChunk = 4 << 10

// errBudgetSpent is readBody's report that take refused to grow the
// buffer: what was read so far comes with it.
var errBudgetSpent = errors.New("replay budget spent")

// readBody reads a body of up to limit bytes, growing its buffer as bytes
// arrive (doubling, up to limit) instead of reserving limit up front: a
// declared length is the client's word, and 200 requests that each
// declared 1 MiB and sent one byte would otherwise hold 200 MiB until their
// body deadline. take is asked for the bytes of each allocation first; when
// it refuses, readBody returns what it read and errBudgetSpent. The body
// ending before limit is io.EOF, with what was read: an error for a
// declared length, the whole body for an unknown one.
func readBody(r io.Reader, limit int64, take func(int64) bool) ([]byte, error) {
	var buf []byte
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			size := min(limit, max(firstBodyChunk, 2*int64(cap(buf))))
			if !take(size - int64(cap(buf))) {
				return buf, errBudgetSpent
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		switch {
		case int64(len(buf)) == limit:
			return buf, nil // the limit, whatever err says
		case errors.Is(err, io.EOF):
			return buf, io.EOF
		case err != nil:
			return nil, err
		}
	}
	return buf, nil
}

// attemptRequest is an attempt's request and its URL, allocated together.
type attemptRequest struct {
	req http.Request
	url url.URL
}

// request builds one attempt: a shallow copy of the outbound request aimed
// at addr. Headers are shared; RoundTrippers must not modify requests.
//
// The request and its URL are one allocation, the first attempt's made
// with st (shortState), except for a long-running request: the HTTP/2
// transport keeps the URL for as long as the stream is open, and the
// request (304 bytes) need not stay with it.
func (b *outBody) request(out *http.Request, addr string, st *reqState) *http.Request {
	var req *http.Request
	var u *url.URL
	if st.Kind == balancer.Long {
		req, u = new(http.Request), new(url.URL)
	} else {
		var ar *attemptRequest
		if st.firstFree {
			st.firstFree = false
			ar = &(*shortState)(unsafe.Pointer(st)).first
		} else {
			ar = new(attemptRequest)
		}
		req, u = &ar.req, &ar.url
	}
	*req = *out
	*u = *out.URL
	u.Host = addr
	req.URL = u
	req.ContentLength = b.length
	// Chunking is hop-by-hop: the transport chunks again by itself when
	// the length is unknown (-1), and only then.
	req.TransferEncoding = nil
	switch {
	case b.buf != nil:
		buf := b.buf
		req.Body = io.NopCloser(bytes.NewReader(buf))
		// GetBody marks the buffered body as one that can be sent again;
		// the HTTP/2 client itself never resends.
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	case b.stream != nil:
		req.Body = io.NopCloser(b.stream)
		req.GetBody = nil
	default:
		req.Body = nil
		req.GetBody = nil
	}
	return req
}

// watchBody makes the response body report to the balancer when it ends,
// count its bytes into st, and lets StopLongRunning end long-running
// ones. into, if not nil, is an unused doneBody to fill in instead of
// allocating one (reqState.body).
func (h *Handler) watchBody(into *doneBody, rc io.ReadCloser, st *reqState, pick balancer.Pick, info balancer.DoneInfo) io.ReadCloser {
	b := into
	if b == nil {
		b = new(doneBody)
	}
	b.rc, b.pick, b.info, b.st = rc, pick, info, st
	if st.Kind == balancer.Long {
		// Added after StopLongRunning ran (shutdown began while the
		// request waited for headers), it is stopped at once and the
		// client gets an empty, complete response.
		h.longBodies.add(b)
	}
	return b
}

// doneBody calls done exactly once, at EOF, read error or Close, whichever
// comes first. Read and Close come from the reverse proxy's goroutine;
// stopNow from a goroutine of StopLongRunning's.
type doneBody struct {
	rc   io.ReadCloser
	pick balancer.Pick
	info balancer.DoneInfo
	// st is the request's: its answer bytes (received) and how the body
	// ended (end).
	st         *reqState
	reported   atomic.Bool
	stopped    atomic.Bool
	rebalanced atomic.Bool
	// set is the bodySet of a long-running response (nil for others),
	// set once before the body is handed on. links, guarded by set.mu,
	// keep it there while it is open; Close may come from two goroutines
	// at once (the rebalancer's watchStream closes the body it reads
	// from).
	set *bodySet
	links[doneBody]
}

func (b *doneBody) linksOf() *links[doneBody] { return &b.links }

func (b *doneBody) Read(p []byte) (int, error) {
	if b.stopped.Load() {
		b.finish(endShutdown)
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	b.st.received.Add(int64(n))
	if err != nil {
		reason := endError
		switch {
		case b.stopped.Load():
			// The error is our own Close from stopNow: end the stream as if
			// the apiserver had ended it.
			err, reason = io.EOF, endShutdown
		case b.rebalanced.Load():
			reason = endRebalanced
		case err == io.EOF:
			reason = endAPIServer
		case errors.Is(err, context.Canceled):
			reason = endClient
		}
		b.finish(reason)
	}
	return n, err
}

func (b *doneBody) Close() error {
	if s := b.set; s != nil {
		s.remove(b)
	}
	// Closed before it ended: by the watch rebalancer (which says so
	// first, EndedByRebalancer), by stopNow, or for the client, who went
	// away or stopped reading.
	reason := endClient
	switch {
	case b.stopped.Load():
		reason = endShutdown
	case b.rebalanced.Load():
		reason = endRebalanced
	}
	b.finish(reason)
	return b.rc.Close()
}

// EndedByRebalancer implements watch.RebalanceEnder: the body is about to
// be closed by the watch rebalancer.
func (b *doneBody) EndedByRebalancer() { b.rebalanced.Store(true) }

// stopNow sets the flag before closing, so the Read that the Close unblocks
// already sees it and turns its error into io.EOF.
func (b *doneBody) stopNow() {
	b.stopped.Store(true)
	_ = b.rc.Close()
}

// finish reports the end, why it came first.
func (b *doneBody) finish(why endReason) {
	if b.reported.CompareAndSwap(false, true) {
		b.st.end.Store(uint32(why))
		b.pick.Done(b.info)
	}
}

// bodySet is the open long-running response bodies, which
// StopLongRunning ends.
type bodySet struct {
	mu      sync.Mutex
	list    ilist[doneBody, *doneBody]
	stopped bool
}

// add puts b in the set, or stops it at once if the set was stopped.
func (s *bodySet) add(b *doneBody) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		go b.stopNow()
		return
	}
	b.set = s
	s.list.push(b)
	s.mu.Unlock()
}

// remove takes b out of the set; it is idempotent, as Close may come
// from two goroutines.
func (s *bodySet) remove(b *doneBody) {
	s.mu.Lock()
	s.list.remove(b)
	s.mu.Unlock()
}

// stopAll stops every body in the set and any added later. Each is
// stopped on a goroutine of its own, as context.AfterFunc did: closing an
// upstream body may wait for its connection, and one stuck connection
// must not hold up the others.
func (s *bodySet) stopAll() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	all := make([]*doneBody, 0, s.list.len())
	for b := range s.list.all() {
		all = append(all, b)
	}
	s.mu.Unlock()
	for _, b := range all {
		go b.stopNow()
	}
}

// handleError is the reverse proxy's ErrorHandler: the single place that
// maps a failure to the status the client sees.
func (h *Handler) handleError(w http.ResponseWriter, r *http.Request, err error) {
	st := stateFrom(r.Context())
	code, reason, msg := describeError(r.Context(), err)
	h.metrics.answered(st.Kind, code, st.endpoint, time.Since(st.Start))
	h.costAnswered(r.Header, st, code, fanoutFailed(code))
	if code == statusClientClosedRequest {
		return // nobody is listening
	}
	if h.endpointHeader {
		setEndpointHeaders(w.Header(), st)
	}
	writeStatus(w, code, reason, msg)
}

func describeError(ctx context.Context, err error) (int, statusReason, string) {
	var (
		pe *pickError
		be *clientBodyError
		ue *upstreamError
	)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return statusClientClosedRequest, statusReasonUnknown, "fanout: the client closed the request"
	case errors.As(err, &pe):
		return http.StatusServiceUnavailable, statusReasonServiceUnavailable, "fanout: " + pe.Error()
	case errors.As(err, &be):
		return http.StatusBadRequest, statusReasonBadRequest, "fanout: " + be.Error()
	case errors.As(err, &ue) && isTimeout(ue.err):
		return http.StatusGatewayTimeout, statusReasonTimeout, "fanout: " + ue.Error()
	case ue != nil:
		// client-go maps a bare 5xx to InternalError too; saying so keeps
		// its behaviour and adds our message.
		return http.StatusBadGateway, statusReasonInternalError, "fanout: " + ue.Error()
	default:
		return http.StatusBadGateway, statusReasonInternalError, "fanout: " + err.Error()
	}
}

// pickError says the balancer had no endpoint to offer.
type pickError struct{ err error }

func (e *pickError) Error() string {
	if errors.Is(e.err, balancer.ErrNoEndpoints) {
		return "no kube-apiserver endpoint is available (none discovered yet, or all removed): " + e.err.Error() + "; check --endpoints and the resolver's logs"
	}
	return "no kube-apiserver endpoint could be picked: " + e.err.Error()
}

func (e *pickError) Unwrap() error { return e.err }

// clientBodyError says reading the client's own request body failed.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string {
	return "reading the request body from the client failed: " + e.err.Error()
}

func (e *clientBodyError) Unwrap() error { return e.err }

// upstreamError names the endpoint a round trip failed on, and the earlier
// failure that caused the retry, if any.
type upstreamError struct {
	endpoint string
	err      error
	first    *upstreamError
}

func (e *upstreamError) Error() string {
	var msg string
	if transport.IsUnprocessed(e.err) {
		msg = e.err.Error() // already names the endpoint
	} else {
		msg = fmt.Sprintf("request to kube-apiserver %s failed: %v", e.endpoint, e.err)
	}
	if e.first != nil {
		msg += " (retried after: " + e.first.Error() + ")"
	}
	return msg
}

func (e *upstreamError) Unwrap() error { return e.err }

// isDialError catches connection failures from a RoundTripper that does not
// wrap them in transport.UnprocessedError: the endpoint is down either way.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// bufferPool keeps each buffer as a pointer to its first byte: a pointer
// fits in the interface sync.Pool stores, where a *[]byte would cost an
// allocation on every Put. Every buffer is b.size long, so the pointer
// gives the slice back whole.
type bufferPool struct {
	size int
	p    sync.Pool
}

func (b *bufferPool) Get() []byte {
	if p, ok := b.p.Get().(*byte); ok {
		return unsafe.Slice(p, b.size)
	}
	return make([]byte, b.size)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) < b.size {
		return // not one of ours: too short to give out again
	}
	b.p.Put(unsafe.SliceData(buf))
}
