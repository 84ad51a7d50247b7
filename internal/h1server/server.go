package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname readRequest

	"golang.org/x/net/http/httpguts"
)

// Config configures a Server. The zero value of a field means its default.
type Config struct {
	// Handler serves every HTTP/1.x request. Required.
	Handler http.Handler
	// ReadHeaderTimeout cuts a client that does not send a whole request
	// header in time (slowloris); 0 means no limit. There is no read or
	// write timeout: a handler sets deadlines itself
	// (http.ResponseController), and long-running answers last hours.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no next
	// request in time; 0 means no limit.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request header; larger ones get 431.
	// Default DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// HeaderBudget, when set, bounds the request header bytes all
	// connections hold together (headerbudget.go): a header that finds
	// it spent gets 431. nil: none.
	HeaderBudget Budget
	// ErrorLog takes the lines net/http's server would log (accept
	// errors, panics, misuse of the ResponseWriter); nil discards them.
	ErrorLog *log.Logger
}

// DefaultMaxHeaderBytes is Config.MaxHeaderBytes' default, net/http's.
const DefaultMaxHeaderBytes = http.DefaultMaxHeaderBytes

// Server serves HTTP/1.x connections; see the package comment. Create it
// with New. Its methods are safe for concurrent use.
type Server struct {
	handler           http.Handler
	h2c               *handoff
	hangups           hangups
	log               *log.Logger
	readHeaderTimeout time.Duration
	idleTimeout       time.Duration
	maxHeaderBytes    int
	headerBudget      Budget

	// baseCtx is every request's context's parent. It carries
	// http.ServerContextKey, as net/http's does: httputil.ReverseProxy
	// aborts (panic(http.ErrAbortHandler)) an answer whose upstream body
	// broke only under a server that says so, and without it ends the
	// chunked answer as if it were whole.
	baseCtx context.Context

	shutting atomic.Bool
	mu       sync.Mutex // guards ln, conns and streams
	ln       net.Listener
	conns    map[*conn]struct{}
	// streams are the detached responses still being copied (Detach).
	streams map[*stream]struct{}
}

// New returns a Server for cfg; Serve serves it.
func New(cfg Config) *Server {
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = log.New(io.Discard, "", 0)
	}
	// The value is an http.Server that describes this one (it is never
	// served): what a handler reads from it, such as its timeouts, is
	// true of this server.
	desc := &http.Server{Handler: cfg.Handler, ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: cfg.MaxHeaderBytes, ErrorLog: cfg.ErrorLog}
	return &Server{
		baseCtx:           context.WithValue(context.Background(), http.ServerContextKey, desc),
		handler:           cfg.Handler,
		h2c:               newHandoff(),
		log:               cfg.ErrorLog,
		readHeaderTimeout: cfg.ReadHeaderTimeout,
		idleTimeout:       cfg.IdleTimeout,
		maxHeaderBytes:    cfg.MaxHeaderBytes,
		headerBudget:      cfg.HeaderBudget,
		conns:             make(map[*conn]struct{}),
		streams:           make(map[*stream]struct{}),
	}
}

// H2C is where the connections that open with the HTTP/2 preface (h2c
// with prior knowledge) go: serve it with net/http (an http.Server whose
// Protocols allow unencrypted HTTP/2). Its Addr is the address Serve
// listens on; it is closed by Shutdown and Close, or by its own server.
func (s *Server) H2C() net.Listener { return s.h2c }

// Serve accepts connections on ln until it is closed, as http.Server.Serve
// does, backing off on temporary errors such as running out of file
// descriptors. After Shutdown or Close it returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.h2c.setAddr(ln.Addr())
	if s.shutting.Load() {
		// Stopped before serving began.
		_ = ln.Close()
		return http.ErrServerClosed
	}
	var delay time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			//lint:ignore SA1019 net/http's Server.Serve retries on the same test (EMFILE and the like)
			if ne, ok := err.(net.Error); ok && ne.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Printf("http: Accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := &conn{srv: s, rwc: rwc, fresh: true, accepted: time.Now()}
		if !s.track(c) {
			_ = rwc.Close()
			continue
		}
		go c.serve()
	}
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// closeListener stops accepting: the first step of a shutdown. The h2c
// hand-off closes too: its server serves no new connection either.
func (s *Server) closeListener() {
	s.shutting.Store(true)
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	_ = s.h2c.Close()
}

// Shutdown stops accepting, closes the idle connections and waits for the
// others to finish their request and for the detached streams to end, as
// http.Server.Shutdown does for its connections; if ctx ends first, it
// returns ctx's error and leaves the rest to Close. It ends no stream
// itself: their bodies end them (a handler's own shutdown). The hang-up
// watcher stops once everything ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListener()
	wait := time.Millisecond
	for {
		if s.closeIdle() {
			s.hangups.stop()
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// closeIdle closes the connections waiting for a request and reports
// whether no connection and no stream is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.mu.Lock()
		// A connection that has sent nothing for 5 s counts as idle, as
		// in net/http: one that has just connected may be about to send.
		if c.idle || (c.fresh && time.Since(c.accepted) > 5*time.Second) {
			_ = c.rwc.Close()
		}
		c.mu.Unlock()
	}
	return len(s.conns) == 0 && len(s.streams) == 0
}

// Close closes every connection and stream and cancels the requests in
// flight, as http.Server.Close does (there, the background read fails).
// It does not wait for the handlers to return; the streams' goroutines
// end on their own once their connection is closed.
func (s *Server) Close() {
	s.closeListener()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.rwc.Close()
		c.hangup()
	}
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.abort()
	}
	s.hangups.stop()
}

// Open reports how many connections are being served and how many
// detached streams are being copied.
func (s *Server) Open() (conns, streams int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns), len(s.streams)
}

// maxHeaderValues is net/http's DefaultMaxHeaderValueCount: a request with
// more header values gets 431, as from net/http's server (http.ReadRequest
// itself has no such limit).
const maxHeaderValues = 500

// maxPostHandlerReadBytes is how much of a request body the handler did
// not read is discarded to keep the connection, as net/http does; more
// closes it.
const maxPostHandlerReadBytes = 256 << 10

// bufferBeforeChunking is how much of a body is held before the header is
// written: a response that ends within it gets a Content-Length.
const bufferBeforeChunking = 2048

// h2cPreface opens every HTTP/2 connection with prior knowledge.
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// conn is one client connection and its goroutine.
type conn struct {
	srv *Server
	rwc net.Conn
	// hr limits what a request header may read (MaxHeaderBytes, plus
	// net/http's 4 KiB of slack) and takes the header budget for it; it
	// is unlimited for bodies.
	hr     headerReader
	bufs   *buffers
	br     *bufio.Reader // bufs.br
	bw     *bufio.Writer // bufs.bw
	remote string
	// token is the connection's key in the hang-up watcher; watched says
	// it has one.
	token   int32
	watched bool
	// deadline says a read deadline is set, which a request body or a
	// connection taken over must not inherit. Atomic: the body timeout's
	// deadline may be lifted from another goroutine (a handler that sends
	// the body upstream on a goroutine of its own).
	deadline atomic.Bool
	lastPost bool
	resp     response

	mu       sync.Mutex
	idle     bool // waiting for a request: shutdown closes it
	fresh    bool // accepted, no byte read yet
	accepted time.Time
	cancel   context.CancelFunc // the request in flight's, nil between requests
	hungUp   bool
	hijacked bool
	detached bool // the last response is a stream's (Detach): see serve
}

// hangup is the watcher's word that the client closed the connection (or
// shut its sending side, as net/http's background read also takes for
// leaving): the request in flight, if any, is canceled.
func (c *conn) hangup() {
	c.mu.Lock()
	c.hungUp = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *conn) setReadDeadline(t time.Time) {
	_ = c.rwc.SetReadDeadline(t)
	c.deadline.Store(!t.IsZero())
}

func (c *conn) serve() {
	defer c.srv.untrack(c)
	c.remote = c.rwc.RemoteAddr().String()
	c.hr = headerReader{r: c.rwc, n: math.MaxInt64, budget: c.srv.headerBudget}
	// Whatever way the connection ends, the header it held is given back.
	defer c.hr.release()
	c.bufs = bufferPool.Get().(*buffers)
	c.br, c.bw = c.bufs.br, c.bufs.bw
	c.br.Reset(&c.hr)
	c.bw.Reset(connWriter{c})
	if d := c.srv.readHeaderTimeout; d > 0 {
		c.setReadDeadline(time.Now().Add(d))
	}
	// The header limit counts from the first byte, as net/http's does:
	// what the preface check reads is the first request's.
	c.hr.start(c.srv.headerReadLimit())
	preface := c.h2cPreface()
	c.mu.Lock()
	c.fresh = false
	c.mu.Unlock()
	if preface {
		c.hr.end()
		c.hr.release()
		if c.deadline.Load() {
			c.setReadDeadline(time.Time{})
		}
		h2, ok := c.srv.takeH2C(&prefaceConn{Conn: c.rwc, br: c.br})
		if !ok {
			_ = c.rwc.Close()
		} else if !c.srv.h2c.handoff(h2) {
			_ = h2.Close()
		}
		return
	}
	defer func() {
		if c.detached {
			// The stream owns the connection and its watch now; the
			// buffers are free.
			c.release()
			return
		}
		if !c.hijacked {
			if c.watched {
				c.srv.hangups.drop(c.token)
			}
			_ = c.rwc.Close()
			c.release()
		}
	}()
	// Where the watcher is not available (not Linux, or stopped), a
	// client leaving mid-request is noticed when a write to it fails.
	c.token, c.watched = c.srv.hangups.register(c.rwc, c)
	for first := true; ; first = false {
		if !first {
			if !c.setIdle(true) {
				return // shutting down
			}
			if d := c.srv.idleTimeout; d > 0 {
				c.setReadDeadline(time.Now().Add(d))
			} else if c.deadline.Load() {
				// No idle limit: the last header's deadline, which a
				// request without a body keeps, must not cut the wait.
				c.setReadDeadline(time.Time{})
			}
			// Four bytes, as net/http waits for: a connection that ends
			// with less is closed without an answer.
			if _, err := c.br.Peek(4); err != nil {
				return
			}
			// A request that came is served, shutdown or not: its answer
			// says Connection: close then.
			c.setIdle(false)
			if d := c.srv.readHeaderTimeout; d > 0 && !headerBuffered(c.br) {
				c.setReadDeadline(time.Now().Add(d))
			}
			// As in net/http, the header limit counts from here: the
			// bytes read while waiting do not.
			c.hr.start(c.srv.headerReadLimit())
		}
		req, err := c.readRequest()
		if err != nil {
			// What was read of the header is garbage now.
			c.hr.release()
			c.refuse(err)
			return
		}
		ok := c.serveRequest(req)
		// The request ended (its handler returned): its header is free.
		c.hr.release()
		if !ok {
			return
		}
	}
}

// buffers are a connection's reader, writer and hold-back buffer. They
// are pooled across connections, as net/http pools its own: a client
// that dials for each request would otherwise leave about 10 KiB of
// garbage per connection. A connection handed over (h2c, Hijack) keeps
// its reader, so its set is not returned.
type buffers struct {
	br      *bufio.Reader
	bw      *bufio.Writer
	pending []byte // response.pending, bufferBeforeChunking long
}

var bufferPool = sync.Pool{New: func() any {
	buffersMade.Add(1)
	return &buffers{
		br:      bufio.NewReaderSize(nil, 4<<10),
		bw:      bufio.NewWriterSize(nil, 4<<10),
		pending: make([]byte, 0, bufferBeforeChunking),
	}
}}

// buffersMade counts the sets the pool had to make (a test's measure
// of their reuse).
var buffersMade atomic.Int64

// release returns the connection's buffers once nothing can touch them.
// The last request's body is closed first: a goroutine the handler
// left (an HTTP/2 client sending the body upstream) may still be reading it (a handler that panicked, a write
// that failed), and Close waits out a read in progress, which the closed
// connection ends.
func (c *conn) release() {
	if b := c.resp.body; b != nil {
		_ = b.Close()
	}
	c.br.Reset(nil)
	c.bw.Reset(nil)
	bufferPool.Put(c.bufs)
	c.bufs, c.br, c.bw = nil, nil, nil
	c.resp.pending = nil
}

// h2cPreface reports whether the connection opens with the HTTP/2
// preface. It reads only as far as the bytes could still be the preface,
// so that a short HTTP/1 request is not held waiting for more.
func (c *conn) h2cPreface() bool {
	if _, err := c.br.Peek(1); err != nil {
		return false
	}
	for n := 1; ; n++ {
		p, err := c.br.Peek(n)
		if err != nil || !strings.HasPrefix(h2cPreface, string(p)) {
			return false
		}
		if n == len(h2cPreface) {
			return true
		}
	}
}

// headerBuffered reports whether a whole request header is already read,
// so that reading it cannot wait on the client.
func headerBuffered(br *bufio.Reader) bool {
	p, _ := br.Peek(br.Buffered())
	return bytes.Contains(p, []byte("\r\n\r\n"))
}

// setIdle marks the connection idle (waiting for a request) or busy, and
// says false when the server is shutting down.
func (c *conn) setIdle(idle bool) bool {
	c.mu.Lock()
	c.idle = idle
	c.mu.Unlock()
	return !c.srv.shutting.Load()
}

var (
	errTooLarge          = errors.New("http: request too large")
	errTooManyHeaders    = errors.New("http: too many header values")
	errMissingHost       = statusError{http.StatusBadRequest, "missing required Host header"}
	errMalformedHost     = statusError{http.StatusBadRequest, "malformed Host header"}
	errInvalidHeaderName = statusError{http.StatusBadRequest, "invalid header name"}
	errInvalidHeaderVal  = statusError{http.StatusBadRequest, "invalid header value"}
	errVersion           = statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
)

// statusError is a request refused with code and text, as net/http's
// server words it.
type statusError struct {
	code int
	text string
}

func (e statusError) Error() string { return strconv.Itoa(e.code) + " " + e.text }

// headerReadLimit is how much a request header may read from the
// connection: MaxHeaderBytes and net/http's 4 KiB of slack.
func (s *Server) headerReadLimit() int64 { return int64(s.maxHeaderBytes) + 4096 }

// readRequest is http.ReadRequest but for its last step, which takes the
// Host lines out of the header: net/http's server checks them first (none,
// an empty one, a malformed one beside an absolute-form target, whose host
// is the request's), and so must this one. net/http keeps the symbol for
// callers by linkname (go.dev/issue/67401).
//
//go:linkname readRequest net/http.readRequest
func readRequest(b *bufio.Reader) (*http.Request, error)

// readRequest reads and checks the next request, as net/http's server
// does; the header read limit (headerReadLimit) is set.
func (c *conn) readRequest() (*http.Request, error) {
	if c.lastPost {
		// RFC 7230 section 3 tolerance for old clients that send CRLFs
		// after a POST body: up to four, as net/http.
		p, _ := c.br.Peek(4)
		for len(p) > 0 && (p[0] == '\r' || p[0] == '\n') {
			_, _ = c.br.Discard(1)
			p = p[1:]
		}
	}
	req, err := readRequest(c.br)
	hit, spent := c.hr.end()
	if err != nil {
		if spent {
			return nil, errHeaderBudget
		}
		// The parser's own "too large" (a folded first header line over
		// 80 bytes) is 431 too, as in net/http; its error is unexported.
		if hit || err.Error() == errTooLarge.Error() {
			return nil, errTooLarge
		}
		return nil, err
	}
	c.lastPost = req.Method == http.MethodPost
	if req.ProtoMajor != 1 {
		return nil, errVersion
	}
	// net/http's checks, on the Host lines as sent.
	hosts, haveHost := req.Header["Host"]
	if req.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && req.Method != http.MethodConnect {
		return nil, errMissingHost
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return nil, errMalformedHost
	}
	// net/http's server counts header lines while it reads them, before
	// it checks any name (so too many lines is 431 even when one of them
	// has a bad name), and the parser takes some out of the header:
	// Transfer-Encoding (one line at most) and, on a chunked request,
	// Trailer (counted as one line). It caps the trailer names declared
	// as it caps values.
	values := 0
	for _, vv := range req.Header {
		values += len(vv)
	}
	if len(req.TransferEncoding) > 0 {
		values++
	}
	if req.Trailer != nil {
		values++
	}
	if values > maxHeaderValues || len(req.Trailer) > maxHeaderValues {
		return nil, errTooManyHeaders
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, errInvalidHeaderName
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, errInvalidHeaderVal
			}
		}
	}
	delete(req.Header, "Host")
	req.RemoteAddr = c.remote
	return req, nil
}

// refuse answers a request that could not be read, as net/http's server
// does, or says nothing when the connection broke or timed out.
func (c *conn) refuse(err error) {
	const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	var se statusError
	switch {
	case errors.Is(err, errTooLarge), errors.Is(err, errTooManyHeaders), errors.Is(err, errHeaderBudget):
		const publicErr = "431 Request Header Fields Too Large"
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 "+publicErr+errorHeaders+publicErr)
		c.closeWriteAndWait()
	case fmt.Sprintf("%T", err) == "*http.unsupportedTEError":
		// One Transfer-Encoding line, chunked, is all net/http reads.
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 501 Not Implemented"+errorHeaders+"Unsupported transfer encoding")
	case isCommonNetReadError(err):
	case errors.As(err, &se):
		msg := fmt.Sprintf("%d %s: %s", se.code, http.StatusText(se.code), se.text)
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 "+msg+errorHeaders+msg)
	default:
		const publicErr = "400 Bad Request"
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 "+publicErr+errorHeaders+publicErr)
	}
}

// isCommonNetReadError is net/http's: a request cut short (unexpected
// EOF) is answered 400, one never begun is not.
func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "read"
}

// closeWriteAndWait sends what is buffered and a FIN, then waits a little
// before the close, so that a client still sending gets the answer
// rather than a reset (net/http's rstAvoidanceDelay).
func (c *conn) closeWriteAndWait() {
	_ = c.bw.Flush()
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else if cw, ok := rawConn(c.rwc).(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	time.Sleep(500 * time.Millisecond)
}

// serveRequest runs the handler for req and ends its response. It says
// whether the connection serves another request.
func (c *conn) serveRequest(read *http.Request) bool {
	ctx, cancel := context.WithCancel(c.srv.baseCtx)
	req := read.WithContext(ctx)
	c.mu.Lock()
	c.cancel = cancel
	hungUp := c.hungUp
	c.mu.Unlock()
	if hungUp {
		cancel()
	}
	defer func() {
		c.mu.Lock()
		c.cancel = nil
		c.mu.Unlock()
		if !c.detached {
			cancel()
		}
	}()

	w := &c.resp
	w.reset(c, req)
	if req.Body != http.NoBody && req.Body != nil {
		if c.deadline.Load() {
			// The header deadline is not the body's: the handler sets that.
			c.setReadDeadline(time.Time{})
		}
		w.body = &reqBody{rc: req.Body, w: w, left: req.ContentLength, read: read, req: req}
		req.Body = w.body
	}
	if expect := req.Header.Get("Expect"); expect != "" {
		// As net/http: the first Expect line holds 100-continue as a
		// token ("100-Continue, x" and "100-continue 0" do), or it is 417.
		if !hasToken(expect, "100-continue") {
			w.header.Set("Connection", "close")
			w.WriteHeader(http.StatusExpectationFailed)
			_ = w.finish()
			return false
		}
		if req.ProtoAtLeast(1, 1) && req.ContentLength != 0 && w.body != nil {
			w.body.sendContinue = true
		}
	}

	ok := c.runHandler(w, req)
	if w.stream != nil {
		// A detached response: its stream copies the rest, and ends the
		// request's context when it ends.
		c.detached = true
		c.startStream(w.stream, cancel, ok)
		return false
	}
	if !ok {
		// As with net/http, a response that had begun to go out (flushed,
		// or past the 2 KiB net/http holds back) is sent as far as it got,
		// so the client sees it cut; one that had not sends nothing.
		if !w.hijacked && (w.flushed || w.written > bufferBeforeChunking) {
			_ = c.bw.Flush()
		}
		return false
	}
	if w.hijacked {
		return false
	}
	if err := w.finish(); err != nil {
		return false
	}
	if w.closeAfter {
		if w.body != nil && !w.body.drained() {
			c.closeWriteAndWait()
		}
		return false
	}
	return !c.srv.shutting.Load()
}

// runHandler calls the handler and says false when it panicked: the
// connection is then closed without ending the response, so the client
// sees it broken (http.ErrAbortHandler is how the reverse proxy asks for
// that, and is not logged).
func (c *conn) runHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler {
				const size = 64 << 10
				buf := make([]byte, size)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.log.Printf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
		}
	}()
	c.srv.handler.ServeHTTP(w, req)
	return true
}

// connWriter writes to the connection, and cancels the request in flight
// when that fails, as net/http's does: the client is gone.
type connWriter struct{ c *conn }

func (cw connWriter) Write(p []byte) (int, error) {
	n, err := cw.c.rwc.Write(p)
	if err != nil {
		cw.c.mu.Lock()
		cancel := cw.c.cancel
		cw.c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
	return n, err
}

// prefaceConn is a connection handed to net/http's HTTP/2 server with the
// bytes already read from it (the preface at least) in front.
type prefaceConn struct {
	net.Conn
	br *bufio.Reader
}

func (p *prefaceConn) Read(b []byte) (int, error) {
	if p.br != nil {
		if p.br.Buffered() > 0 {
			return p.br.Read(b)
		}
		p.br = nil
	}
	return p.Conn.Read(b)
}

// NetConn lets the hang-up watcher and rawConn reach the TCP connection.
func (p *prefaceConn) NetConn() net.Conn { return p.Conn }

// handoff is how h2c connections reach net/http's server: its Accept
// returns the connections the Server hands it.
type handoff struct {
	addr  atomic.Pointer[net.Addr]
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoff() *handoff {
	return &handoff{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoff) setAddr(a net.Addr) { l.addr.Store(&a) }

func (l *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoff) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the served listener's address, nil before Serve.
func (l *handoff) Addr() net.Addr {
	if a := l.addr.Load(); a != nil {
		return *a
	}
	return nil
}

// handoff gives c to net/http's server, and says false once it stopped.
func (l *handoff) handoff(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// reqBody is a request's body as the handler reads it: it sends 100
// Continue on the first read when the client asked for it, and tracks
// what is left, so that the end of the response can tell whether the
// connection can serve another request. Read and Close may come from the
// goroutine the handler started (an HTTP/2 client's) as well as the handler's.
type reqBody struct {
	mu sync.Mutex
	rc io.ReadCloser
	// read is the request as http.ReadRequest made it, whose Trailer the
	// body's end fills; req is the handler's copy of it.
	read, req    *http.Request
	w            *response
	left         int64 // of a declared length; -1 when unknown
	sendContinue bool
	sawEOF       bool
	closed       bool
}

func (b *reqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.sendContinue {
		b.sendContinue = false
		if err := b.w.writeContinue(); err != nil {
			return 0, err
		}
	}
	n, err := b.rc.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if errors.Is(err, io.EOF) {
		b.sawEOF = true
		if b.req.Trailer == nil {
			// Trailers the header did not declare: the map is new.
			b.req.Trailer = b.read.Trailer
		}
	}
	return n, err
}

// Close marks the body closed; what is left is dealt with at the end of
// the response (discard), not here: the body of http.ReadRequest would
// read all of it.
func (b *reqBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// discard reads what is left of the body, up to maxPostHandlerReadBytes,
// and says whether it reached the end. A client that was asked to wait
// for 100 Continue and was not sent it has sent no body: nothing is read.
func (b *reqBody) discard() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sawEOF {
		return true
	}
	if b.sendContinue || b.left >= maxPostHandlerReadBytes {
		return false
	}
	n, err := io.CopyN(io.Discard, b.rc, maxPostHandlerReadBytes+1)
	if b.left > 0 {
		b.left -= n
	}
	if errors.Is(err, io.EOF) {
		b.sawEOF = true
	}
	return b.sawEOF
}

// drained reports whether the whole body was read.
func (b *reqBody) drained() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sawEOF
}

// response is the ResponseWriter of Server, one per connection,
// reset for each request. Only the handler's goroutine writes, except 100
// Continue (reqBody.Read), which takes wmu as the header's write does.
type response struct {
	c      *conn
	req    *http.Request
	body   *reqBody
	header http.Header
	// snap is the header as it was at WriteHeader, when the handler
	// reads the header again before it is written (the reverse proxy
	// does, for trailers): what it changes then is not sent, as with
	// net/http. Its map is the connection's, reused; nil when unused.
	snap    http.Header
	snapMap http.Header

	status        int
	contentLength int64 // declared by the handler, or -1
	written       int64
	pending       []byte // body held before the header is written (bufferBeforeChunking)
	trailers      []string
	dateBuf       [len(http.TimeFormat)]byte

	wroteHeader bool // WriteHeader was called
	headerSent  bool // the header is in the connection's buffer
	chunked     bool
	closeAfter  bool
	handlerDone bool
	hijacked    bool
	flushed     bool
	fullDuplex  bool
	// stream, once the handler detached the response (Detach), copies
	// the rest of it.
	stream *stream
	isHead bool
	// wants10KeepAlive and wantsClose are what the request's Connection
	// line asks for, read as net/http reads it (hasToken) before the
	// handler may change the header.
	wants10KeepAlive, wantsClose bool

	wmu           sync.Mutex
	continueState int // 0: none sent, 1: 100 Continue sent, 2: too late (header written)
}

func (w *response) reset(c *conn, req *http.Request) {
	if w.header == nil {
		w.header = make(http.Header)
	}
	clear(w.header)
	*w = response{c: c, req: req, header: w.header, snapMap: w.snapMap, pending: c.bufs.pending[:0],
		contentLength: -1, isHead: req.Method == http.MethodHead, trailers: w.trailers[:0]}
	var conn string
	if v := req.Header["Connection"]; len(v) > 0 {
		conn = v[0]
	}
	w.wants10KeepAlive = req.ProtoMajor == 1 && req.ProtoMinor == 0 && hasToken(conn, "keep-alive")
	w.wantsClose = req.Close || hasToken(conn, "close")
}

// hasToken is net/http's reading of the first Connection or Expect line
// of a request (its hasToken): token anywhere in v, ASCII
// case-insensitive, between the ends, spaces, tabs or commas. It is looser
// than the parser's list reading: "keep-alive 0" keeps an HTTP/1.0
// connection, "close 0" closes one, and "100-continue 0" is 100-continue.
func hasToken(v, token string) bool {
	for sp := 0; sp+len(token) <= len(v); sp++ {
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isTokenBoundary(v[end]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

func (w *response) Header() http.Header {
	if w.wroteHeader && !w.headerSent && w.snap == nil {
		if w.snapMap == nil {
			w.snapMap = make(http.Header, len(w.header))
		}
		w.snap = w.snapMap
		clear(w.snap)
		for k, vv := range w.header {
			w.snap[k] = vv
		}
	}
	return w.header
}

func (w *response) WriteHeader(code int) {
	if w.hijacked {
		w.c.srv.log.Printf("http: response.WriteHeader on hijacked connection")
		return
	}
	if w.wroteHeader {
		w.c.srv.log.Printf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	if cl := w.header.Get("Content-Length"); cl != "" {
		v, err := strconv.ParseInt(cl, 10, 64)
		if err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.srv.log.Printf("http: invalid Content-Length of %q", cl)
			w.header.Del("Content-Length")
		}
	}
}

// writeInformational sends a 1xx at once, with the headers set so far,
// as net/http does (103 Early Hints, or a 100 the handler sends itself).
func (w *response) writeInformational(code int) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if code == http.StatusContinue {
		if w.continueState != 0 {
			return
		}
		w.continueState = 1
	}
	bw := w.c.bw
	writeStatusLine(bw, true, code)
	writeHeaderFields(bw, w.header, func(k string) bool { return k == "Content-Length" || k == "Transfer-Encoding" })
	_, _ = bw.WriteString("\r\n")
	_ = bw.Flush()
}

// writeContinue sends 100 Continue unless the final header went first.
func (w *response) writeContinue() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.continueState != 0 {
		return nil
	}
	w.continueState = 1
	_, _ = w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	return w.c.bw.Flush()
}

func (w *response) bodyAllowed() bool {
	return bodyAllowedForStatus(w.status)
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

func (w *response) Write(p []byte) (int, error) {
	if w.hijacked || w.stream != nil {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.headerSent {
		if w.contentLength == -1 && len(w.pending)+len(p) <= bufferBeforeChunking {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		first := p
		if len(w.pending) > 0 {
			first = w.pending
		}
		w.writeHeader(first)
		if err := w.writeBody(w.pending); err != nil {
			return 0, err
		}
		w.pending = w.pending[:0]
	}
	if err := w.writeBody(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeBody puts p in the connection's buffer, as a chunk when chunking.
// HEAD answers carry no body.
func (w *response) writeBody(p []byte) error {
	if len(p) == 0 || w.isHead {
		return nil
	}
	bw := w.c.bw
	if w.chunked {
		var size [16]byte
		_, _ = bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(p)
		_, err := bw.WriteString("\r\n")
		return err
	}
	_, err := bw.Write(p)
	return err
}

// FlushError is what http.ResponseController calls: the header and what
// is held go out.
func (w *response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if w.stream != nil {
		return nil // the stream writes each chunk as it comes
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		w.writeHeader(w.pending)
		if err := w.writeBody(w.pending); err != nil {
			return err
		}
		w.pending = w.pending[:0]
	}
	w.flushed = true
	return w.c.bw.Flush()
}

// Flush implements http.Flusher.
func (w *response) Flush() { _ = w.FlushError() }

// SetReadDeadline and SetWriteDeadline are what http.ResponseController
// calls (a request body timeout).
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.deadline.Store(!t.IsZero())
	return w.c.rwc.SetReadDeadline(t)
}

func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// EnableFullDuplex lets the handler read the body after writing the
// header; the body is then not discarded when the header goes out.
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// Hijack hands the connection over. A header written but not sent goes
// out first, chunked (the handler is still running), as with net/http:
// an upgrade's or a handler's own stream writes after it.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked || w.stream != nil {
		return nil, nil, http.ErrHijacked
	}
	c := w.c
	if w.wroteHeader && !w.headerSent {
		w.writeHeader(w.pending)
		if err := w.writeBody(w.pending); err != nil {
			return nil, nil, err
		}
		w.pending = w.pending[:0]
	}
	if err := c.bw.Flush(); err != nil {
		return nil, nil, err
	}
	w.hijacked = true
	c.mu.Lock()
	c.hijacked = true
	c.mu.Unlock()
	c.srv.untrack(c)
	if c.watched {
		c.srv.hangups.unregister(c.rwc, c.token)
		c.watched = false
	}
	if c.deadline.Load() {
		c.setReadDeadline(time.Time{})
	}
	return c.rwc, bufio.NewReadWriter(c.br, bufio.NewWriter(c.rwc)), nil
}

// writeHeader puts the status line and header in the connection's buffer,
// deciding length, chunking and the connection's reuse as net/http's
// server does. p is the start of the body, for the length of a response
// that ends within it and for the Content-Type sniff.
func (w *response) writeHeader(p []byte) {
	w.headerSent = true
	h := w.header
	if w.snap != nil {
		h = w.snap
	}
	req := w.req
	is11 := req.ProtoAtLeast(1, 1)

	for _, v := range h["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = textproto.TrimString(k); k != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(k))
			}
		}
	}
	te := h.Get("Transfer-Encoding")
	hasTE := te != ""
	if w.handlerDone && len(w.trailers) == 0 && !hasTE && w.bodyAllowed() && !has(h, "Content-Length") && (!w.isHead || len(p) > 0) {
		w.contentLength = int64(len(p))
		h["Content-Length"] = []string{strconv.Itoa(len(p))}
	}
	hasCL := w.contentLength != -1
	if w.wants10KeepAlive && (w.isHead || hasCL || !w.bodyAllowed()) {
		if _, set := h["Connection"]; !set {
			h["Connection"] = []string{"keep-alive"}
		}
	} else if !is11 || w.wantsClose {
		w.closeAfter = true
	}
	if h.Get("Connection") == "close" || w.c.srv.shutting.Load() {
		w.closeAfter = true
	}
	if b := w.body; b != nil && !w.closeAfter && !w.fullDuplex {
		if b.sendContinueLeft() {
			// The client still waits for 100 Continue: it has sent no
			// body, and the connection cannot be reused.
			w.closeAfter = true
		} else if !b.discard() {
			w.closeAfter = true
			h.Del("Connection")
			h["Connection"] = []string{"close"}
		}
	}
	w.wmu.Lock()
	w.continueState = 2
	w.wmu.Unlock()

	if w.bodyAllowed() {
		_, haveType := h["Content-Type"]
		if !haveType && h.Get("Content-Encoding") == "" && !hasTE && len(p) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(p)}
		}
	} else {
		for _, k := range suppressedHeaders(w.status) {
			h.Del(k)
		}
	}
	if hasCL && hasTE && te != "identity" {
		w.c.srv.log.Printf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.contentLength)
		h.Del("Content-Length")
		hasCL = false
	}
	switch {
	case w.isHead || !w.bodyAllowed():
		h.Del("Transfer-Encoding")
	case hasCL:
		h.Del("Transfer-Encoding")
	case is11:
		if te == "identity" {
			w.closeAfter = true
			h.Del("Transfer-Encoding")
		} else {
			w.chunked = true
			h["Transfer-Encoding"] = []string{"chunked"}
		}
	default:
		w.closeAfter = true
		h.Del("Transfer-Encoding")
	}
	if w.chunked {
		h.Del("Content-Length")
	}
	if w.closeAfter && !httpguts.HeaderValuesContainsToken(h["Connection"], "close") &&
		!(w.status == http.StatusSwitchingProtocols && h.Get("Upgrade") != "") {
		h.Del("Connection")
		if is11 {
			h["Connection"] = []string{"close"}
		}
	}

	bw := w.c.bw
	writeStatusLine(bw, is11, w.status)
	writeHeaderFields(bw, h, isTrailerPrefixed)
	if !has(h, "Date") {
		// Written, not put in the header: as in net/http, the handler's
		// map does not get it, and no string is made per response.
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(time.Now().UTC().AppendFormat(w.dateBuf[:0], http.TimeFormat))
		_, _ = bw.WriteString("\r\n")
	}
	_, _ = bw.WriteString("\r\n")
}

// sendContinueLeft reports whether 100 Continue was asked for and never
// sent: the body was not read.
func (b *reqBody) sendContinueLeft() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sendContinue
}

func has(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

func isTrailerPrefixed(k string) bool { return strings.HasPrefix(k, http.TrailerPrefix) }

// suppressedHeaders are those a status without a body does not carry, as
// in net/http.
func suppressedHeaders(status int) []string {
	switch {
	case status == http.StatusNotModified:
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	case !bodyAllowedForStatus(status):
		return []string{"Content-Length", "Transfer-Encoding"}
	}
	return nil
}

func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	if is11 {
		_, _ = bw.WriteString("HTTP/1.1 ")
	} else {
		_, _ = bw.WriteString("HTTP/1.0 ")
	}
	var num [3]byte
	_, _ = bw.Write(strconv.AppendInt(num[:0], int64(code), 10))
	_ = bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		_, _ = bw.WriteString(text)
	} else {
		_, _ = bw.WriteString("status code ")
		_, _ = bw.Write(strconv.AppendInt(num[:0], int64(code), 10))
	}
	_, _ = bw.WriteString("\r\n")
}

// headerNewlineToSpace keeps a value on its line, as net/http's
// Header.Write does.
var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// writeHeaderFields writes h's fields but those skip names, and drops
// names that are not valid, as net/http's Header.Write does.
func writeHeaderFields(bw *bufio.Writer, h http.Header, skip func(string) bool) {
	for k, vv := range h {
		if !skip(k) {
			writeField(bw, k, vv)
		}
	}
}

// writeField writes one field's lines, unless its name is not valid; a
// value keeps to its line (CR and LF become spaces) and is trimmed, as
// with net/http.
func writeField(bw *bufio.Writer, k string, vv []string) {
	if !httpguts.ValidHeaderFieldName(k) {
		return
	}
	for _, v := range vv {
		if strings.ContainsAny(v, "\r\n") {
			v = headerNewlineToSpace.Replace(v)
		}
		_, _ = bw.WriteString(k)
		_, _ = bw.WriteString(": ")
		_, _ = bw.WriteString(textproto.TrimString(v))
		_, _ = bw.WriteString("\r\n")
	}
}

// finish ends the response once the handler returned: the header if not
// yet sent, what is held, the last chunk and the trailers, then a flush.
// A response shorter than its declared length leaves the connection out
// of step with the client: it is closed.
func (w *response) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.handlerDone = true
	if !w.headerSent {
		w.writeHeader(w.pending)
		if err := w.writeBody(w.pending); err != nil {
			return err
		}
		w.pending = w.pending[:0]
	}
	bw := w.c.bw
	if w.chunked {
		_, _ = bw.WriteString("0\r\n")
		w.writeTrailers()
		_, _ = bw.WriteString("\r\n")
	}
	if !w.isHead && w.contentLength != -1 && w.bodyAllowed() && w.contentLength != w.written {
		w.closeAfter = true
	}
	if b := w.body; b != nil {
		if !w.closeAfter && !b.drained() && !b.discard() {
			// Read after the header went out (full duplex) or by
			// nobody: the connection is reusable only past the end of
			// the body.
			w.closeAfter = true
		}
		// A late read (a goroutine the handler left) must not take
		// the next request's bytes: as in net/http, it gets an error.
		_ = b.Close()
	}
	return bw.Flush()
}

// writeTrailers writes the declared trailers and those set with
// http.TrailerPrefix, as net/http does.
func (w *response) writeTrailers() {
	bw := w.c.bw
	for _, k := range w.trailers {
		if vv, ok := w.header[k]; ok {
			writeField(bw, k, vv)
		}
	}
	for k, vv := range w.header {
		if isTrailerPrefixed(k) {
			writeField(bw, strings.TrimPrefix(k, http.TrailerPrefix), vv)
		}
	}
}
