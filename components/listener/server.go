package listener

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/h1server"
	"github.com/fanout-dev/fanout/internal/handoff"
	"github.com/fanout-dev/fanout/internal/kstatus"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/serve"
)

// Handler is what the Server needs of the request path; *proxy.Handler is
// one (the engine's Handler()).
type Handler interface {
	// ServeHTTP serves a request whose context carries its
	// reqinfo.Request, made at the Server's edge (withRequestInfo): its
	// one classification, and the end the handler registers what it
	// holds with.
	http.Handler
	// StopLongRunning ends the open long-running responses cleanly and
	// refuses new requests; Stop calls it when shutdown begins.
	StopLongRunning()
	// CloseUpgrades waits for upgraded connections (exec, attach,
	// port-forward) until ctx is done, then closes them.
	CloseUpgrades(ctx context.Context) error
}

// Server serves a Handler on the loopback address client-go is pointed at.
// HTTP/1.1 and HTTP/2 with prior knowledge (h2c) share the port: client-go
// speaks HTTP/1.1 to an http:// server unless told otherwise, and h2c lets
// a client that is told so multiplex all its watches on one connection.
type Server struct {
	cfg     Config
	handler Handler
	metrics *Metrics
	// srv is net/http's server: TLS (HTTP/2 by ALPN and HTTP/1.1), h2c
	// handed over by h1, and with H1ServerStd plaintext HTTP/1.1 and h2c.
	srv *http.Server
	// h1 serves the plaintext listener's HTTP/1.x (internal/h1server),
	// from Start on; nil with TLS or H1ServerStd. See route.
	h1 *h1server.Server
	// headers is the header budget (headerbudget.go); nil when off.
	headers *budget.Bytes

	mu        sync.Mutex // guards ln, inherited, handout and served
	ln        net.Listener
	inherited bool
	// handout serves the socket to a restarted `fanout hold`; nil
	// without ListenFrom.
	handout  *handoff.Server
	served   chan struct{} // closed when Serve returned
	serveErr error

	// acceptAfter and acceptWait hold accepting back (AcceptAfter);
	// stopping is closed by Stop, which ends that wait.
	acceptAfter <-chan struct{}
	acceptWait  time.Duration
	stopping    chan struct{}
	stopOnce    sync.Once
}

// New prepares a Server for h, counting into m (NewMetrics; nil counts
// into collectors nobody registered); Start listens.
func New(cfg Config, h Handler, m *Metrics) *Server {
	if m == nil {
		m = newMetrics()
	}
	cfg = cfg.withDefaults()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	// net/http's own h2c, prior knowledge only: no "Upgrade: h2c" dance,
	// which would collide with the upgrades kubectl exec uses.
	protocols.SetUnencryptedHTTP2(true)
	if cfg.TLS != nil {
		// TLS: HTTP/2 by ALPN, so client-go multiplexes every request on
		// one connection and health-checks it with its own pings.
		protocols = http.Protocols{}
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
	}
	var handler http.Handler = h
	if !cfg.AllowAnyHost {
		handler = withLoopbackHost(handler)
	}
	var headers *budget.Bytes
	if cfg.HeaderBudget > 0 {
		headers = budget.New(cfg.HeaderBudget, m.headerUsed, m.headerExhausted)
		m.headerLimit.Set(float64(cfg.HeaderBudget))
	}
	srv := &http.Server{
		Addr: cfg.ListenAddress,
		// Classified once, here at the edge; everything behind reads it.
		Handler: withHeaderBudget(withRequestInfo(withLimits(WithRejectProxyRequests(handler), cfg.MaxInflight, cfg.MaxLongRunning,
			cfg.RequestBodyTimeout, m)), headers, cfg.ownH1()),
		TLSConfig:         cfg.TLS,
		ErrorLog:          log.New(serverLogWriter{cfg.Log}, "", 0),
		Protocols:         &protocols,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          cfg.MaxConcurrentStreams,
			MaxReceiveBufferPerStream:     cfg.MaxReceiveBufferPerStream,
			MaxReceiveBufferPerConnection: cfg.MaxReceiveBufferPerConnection,
		},
	}
	// Shutdown calls this after closing the listener and before waiting for
	// requests, which is the order a clean stop needs: no new connections,
	// then watches end (clients re-watch elsewhere), then short requests
	// drain.
	srv.RegisterOnShutdown(h.StopLongRunning)
	return &Server{cfg: cfg, handler: h, metrics: m, srv: srv, headers: headers, stopping: make(chan struct{})}
}

// AcceptAfter makes Start listen at once but accept only once ready is
// closed, or wait has passed; call it before Start. Connections made
// meanwhile wait in the socket's backlog. The sidecar holds its client's
// requests so until the engine has its first endpoints, rather than
// answering them 503, after which client-go sleeps the Retry-After (1 s):
// after a restart with `fanout hold` the client's queued requests are then
// answered as soon as fanout can, and at a first start too.
func (s *Server) AcceptAfter(ready <-chan struct{}, wait time.Duration) {
	s.acceptAfter, s.acceptWait = ready, wait
}

// awaitAccept waits for what AcceptAfter set, and says false when Stop
// came first.
func (s *Server) awaitAccept() bool {
	if s.acceptAfter == nil {
		return true
	}
	t := time.NewTimer(s.acceptWait)
	defer t.Stop()
	select {
	case <-s.acceptAfter:
	case <-t.C:
		s.cfg.Log.Warn("accepting client connections before the first endpoints are known: requests meanwhile are answered 503 with Retry-After",
			"waited", s.acceptWait)
	case <-s.stopping:
		return false
	}
	return true
}

// withRequestInfo is the edge, as kube-apiserver's WithRequestInfo is of
// its own: it classifies each request once and puts the result in the
// request's context (reqinfo.Classify), where the limits,
// the handler, the forwarder, the watch hook and the metrics read it. It
// also ends the request (endRequest), once, for everything behind.
func withRequestInfo(next limitedHandler) http.Handler { return &edge{next} }

// edge is withRequestInfo's handler.
type edge struct{ next limitedHandler }

func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r, req := reqinfo.Classify(r, time.Now())
	defer endRequest(w, req)
	e.next.serve(w, r, req)
}

// endRequest ends req, whose handler returned (or panicked) having
// answered on w: now, or when the stream of an answer the handler detached
// ends (components/proxy/h1stream.go), which outlives the handler.
func endRequest(w http.ResponseWriter, req *reqinfo.Request) {
	if h1server.Detached(w) {
		h1server.OnStreamEnd(w, req.End)
		return
	}
	req.End()
}

// route serves ln until it is closed, and is the one place that says which
// server takes a connection: with TLS, net/http (HTTP/2 by ALPN, or
// HTTP/1.1); plaintext, fanout's own HTTP/1.1 server, which hands a
// connection that opens with the HTTP/2 preface (h2c with prior knowledge)
// to net/http, or with H1ServerStd net/http for both.
func (s *Server) route(ln net.Listener) error {
	switch {
	case s.cfg.TLS != nil:
		// The certificate is in TLSConfig; the listener is limited
		// before TLS, so a handshake flood counts against it too.
		return s.srv.ServeTLS(ln, "", "")
	case s.h1 == nil:
		// net/http tells h2c from HTTP/1.1 by the preface itself.
		return s.srv.Serve(ln)
	}
	h2cDone := make(chan error, 1)
	go func() { h2cDone <- s.srv.Serve(s.h1.H2C()) }()
	err := s.h1.Serve(ln)
	if !errors.Is(err, http.ErrServerClosed) {
		// Serve failed: stop the h2c side too.
		_ = s.h1.H2C().Close()
	}
	// Shutdown or Close closes the hand-off listener too.
	if herr := <-h2cDone; err == nil || errors.Is(err, http.ErrServerClosed) {
		err = herr
	}
	if errors.Is(err, net.ErrClosed) {
		err = http.ErrServerClosed
	}
	return err
}

// Start listens and serves in the background. It returns once the listener
// is open, so a client can connect as soon as it returns. The Config passed
// Validate where it was built (the sidecar's Config.Validate).
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("listener: server already started")
	}
	tl, inherited, err := s.open(ctx)
	if err != nil {
		return err
	}
	ln := acceptFrom(tl, inherited)
	if inherited {
		s.metrics.inherited.Set(1)
	} else {
		s.metrics.inherited.Set(0)
	}
	s.inherited = inherited
	s.handout = s.handOut(tl)
	ln = serve.LimitListener(ln, s.cfg.MaxConnections, serve.ListenerMetrics{
		Rejected: s.metrics.rejected.WithLabelValues(rejectConnections), Open: s.metrics.connections})
	s.ln = ln
	s.served = make(chan struct{})
	if s.cfg.ownH1() {
		cfg := h1server.Config{
			Handler:           s.srv.Handler,
			ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
			IdleTimeout:       s.cfg.IdleTimeout,
			MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
			ErrorLog:          s.srv.ErrorLog,
		}
		if s.headers != nil {
			cfg.HeaderBudget = s.headers
		}
		s.h1 = h1server.New(cfg)
	}
	go func() {
		defer close(s.served)
		if !s.awaitAccept() {
			_ = ln.Close()
			return
		}
		if err := s.route(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	return nil
}

// listenConfig configures the client listener. On a loopback address
// accepted connections get no TCP keep-alive: the peer is a process on the
// same host, whose sockets the kernel closes or resets when it exits, so
// probes would find nothing, and Go sets keep-alive with four setsockopt
// calls per accepted connection (2.5 % of fanout's CPU while an HTTP/1.1
// client's pool opened and closed thousands of connections a second;
// docs/footprint.md). Other addresses (--allow-remote) keep Go's default.
func listenConfig(addr string) net.ListenConfig {
	var lc net.ListenConfig
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Unmap().IsLoopback() {
		lc.KeepAlive = -1
	}
	return lc
}

// Handler is the chain the server serves, from the edge's classification
// to the handler, for benchmarks that drive it without a socket.
func (s *Server) Handler() http.Handler { return s.srv.Handler }

// Addr is the address the server listens on, nil before Start. With port 0
// in ListenAddress it tells the port actually chosen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Stop stops accepting connections, ends long-running requests cleanly
// (Handler.StopLongRunning), and waits for short requests and upgraded
// connections (exec, attach, port-forward; Handler.CloseUpgrades) until ctx
// is done; whatever is still open then is closed. Config.ShutdownGrace, when set,
// bounds that wait further. It returns ctx's error when it had
// to cut requests, or the error that stopped Serve early.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	started := s.ln != nil
	s.mu.Unlock()
	if !started {
		// Shutdown would not call the hook without a listener; stop the
		// handler anyway so an unstarted server leaves nothing running.
		s.handler.StopLongRunning()
		return nil
	}
	s.stopOnce.Do(func() { close(s.stopping) })
	if s.cfg.ShutdownGrace > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.ShutdownGrace)
		defer cancel()
	}
	// Both servers stop accepting at once; srv's Shutdown ends the
	// long-running responses (StopLongRunning), so that h1's, which waits
	// for the streams it serves detached (components/proxy/h1stream.go),
	// can return.
	h1Done := make(chan error, 1)
	if s.h1 != nil {
		go func() { h1Done <- s.h1.Shutdown(ctx) }()
	} else {
		h1Done <- nil
	}
	err := s.srv.Shutdown(ctx)
	if herr := <-h1Done; err == nil {
		err = herr
	}
	if err != nil {
		_ = s.srv.Close()
		if s.h1 != nil {
			s.h1.Close()
		}
	}
	// Shutdown does not wait for upgraded connections: they get what is
	// left of the grace, then are closed.
	if uerr := s.handler.CloseUpgrades(ctx); err == nil {
		err = uerr
	}
	<-s.served
	if s.handout != nil {
		_ = s.handout.Close()
	}
	if err == nil {
		err = s.serveErr
	}
	return err
}

// Inherited tells whether the listening socket came from `fanout hold`
// (Config.ListenFrom) rather than being opened by the Server.
func (s *Server) Inherited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inherited
}

// WithRejectProxyRequests refuses requests meant for a forward proxy.
// fanout listens on loopback, but any local process (or a browser tricked by
// DNS rebinding) can reach it; it must not become a way to tunnel anywhere.
func WithRejectProxyRequests(next http.Handler) http.Handler { return &rejectProxyRequests{next} }

// rejectProxyRequests is WithRejectProxyRequests' handler.
type rejectProxyRequests struct{ next http.Handler }

func (h *rejectProxyRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Absolute-form ("GET http://host/ HTTP/1.1") is how clients talk to
	// a forward proxy; client-go pointed at fanout sends origin-form.
	if r.Method == http.MethodConnect || r.URL.Host != "" || !strings.HasPrefix(r.RequestURI, "/") {
		refuseProxyRequest(w, r)
		return
	}
	h.next.ServeHTTP(w, r)
}

// refuseProxyRequest answers a request meant for a forward proxy. It is a
// function of its own so that its messages are built off the frame a watch
// stays parked below (cmd/fanout's TestFootprintPerWatch).
func refuseProxyRequest(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		kstatus.Write(w, http.StatusMethodNotAllowed, kstatus.ReasonMethodNotAllowed,
			"fanout is not an open proxy: CONNECT is not allowed; send Kubernetes API requests to fanout directly")
		return
	}
	kstatus.Write(w, http.StatusBadRequest, kstatus.ReasonBadRequest,
		"fanout is not an open proxy: the request URI must be a path such as /api/v1/pods, got "+quoteURI(r.RequestURI))
}

// quoteURI keeps an attacker-chosen URI short in our answer.
func quoteURI(uri string) string {
	const max = 200
	if len(uri) > max {
		uri = uri[:max] + "..."
	}
	return fmt.Sprintf("%q", uri)
}

// serverLogWriter takes net/http's server error lines. A failed TLS
// handshake is logged once per connection and any local process can cause
// one, so those go to the debug level (-v 1) rather than flood the log;
// the rest (accept errors such as running out of file descriptors, panics)
// stay warnings.
type serverLogWriter struct{ log *slog.Logger }

func (w serverLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.Contains(msg, "TLS handshake error") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}
