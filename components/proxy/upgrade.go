package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
)

// UpgradeDialer opens the upstream connection of an upgrade request (exec,
// attach, port-forward over SPDY/3.1 or WebSocket). It is satisfied by
// *transport.Transports; the Handler finds it on its Upstream, and answers
// upgrades with 501 when the Upstream lacks it.
//
// Both methods are called concurrently from every upgrade request.
// DialUpgrade returns a new HTTP/1.1 TLS connection (ALPN http/1.1) with the
// credentials of mode that the caller owns; its errors mean nothing was sent
// (*transport.UnprocessedError), so the request may go elsewhere.
// AuthorizeUpgrade sets the credential headers of the outgoing request for
// mode; its errors must not contain secrets.
type UpgradeDialer interface {
	DialUpgrade(ctx context.Context, address string, mode transport.AuthMode) (net.Conn, error)
	AuthorizeUpgrade(h http.Header, mode transport.AuthMode) error
}

var _ UpgradeDialer = (*transport.Transports)(nil)

// upgradeResponseTimeout bounds the wait for the apiserver's answer to an
// upgrade request (101 or an error), which kube-apiserver gives once it has
// reached the kubelet. Once upgraded, a connection has no deadline.
const upgradeResponseTimeout = 60 * time.Second

// Protocols of fanout_upgrade* metrics.
const (
	protoSPDY      = "spdy"
	protoWebSocket = "websocket"
	protoOther     = "other"
)

// Results of fanout_upgrades_total.
const (
	resultUpgraded = "upgraded" // the apiserver switched protocols
	resultRejected = "rejected" // the apiserver answered with an error status
	resultError    = "error"    // fanout got no answer (no endpoint, dial, I/O)
)

// upgradeProtocol buckets the Upgrade header into a bounded label.
func upgradeProtocol(r *http.Request) string {
	u := strings.ToLower(r.Header.Get("Upgrade"))
	switch {
	case strings.HasPrefix(u, "spdy/"):
		return protoSPDY
	case u == "websocket":
		return protoWebSocket
	default:
		return protoOther
	}
}

// serveUpgrade proxies one upgrade request over its own HTTP/1.1 connection
// to an endpoint picked as long-running, through the attempt policy
// (attempt.go): a dial that fails before anything was sent is retried
// once on another endpoint, within the retry budget; an answer, already
// the client's, is never retried.
//
// Contract with shutdown and rebalancing: the upgraded connection is owned
// by this request alone. It is not registered with stopCtx, so
// StopLongRunning (which ends watches at the start of a shutdown, and
// whatever later rebalances watches) never ends it; it never rides the
// HTTP/2 pools, so it takes no stream there. Only its two peers end it, or
// CloseUpgrades when the shutdown grace has run out.
func (h *Handler) serveUpgrade(w http.ResponseWriter, r *http.Request, st *reqState) {
	proto := upgradeProtocol(r)
	if h.upgrader == nil {
		h.metrics.answered(balancer.Long, http.StatusNotImplemented, "", h.now().Sub(st.start))
		h.metrics.upgraded(proto, resultError)
		writeStatus(w, http.StatusNotImplemented, statusReasonUnknown,
			"fanout: this fanout's upstream cannot dial HTTP/1.1 connections for upgrade requests (exec/attach/port-forward)")
		return
	}
	h.metrics.openLong.Inc()
	defer h.metrics.openLong.Dec()

	s := &upgradeSession{h: h, w: w, r: r, mode: st.Mode, proto: proto, start: st.start}
	defer s.release()
	a := h.newAttempts(r, st, outBody{replayable: true})
	a.upgrade = s
	// Whatever its path, an upgrade holds its connection for as long as
	// the session lasts.
	a.pick.Kind = balancer.Long
	ans, err := a.run()
	if err != nil {
		h.upgradeFailed(w, r, proto, st.endpoint, st.start, err)
		return
	}
	// Answered, and counted as such when the answer went out. The status
	// of exec, attach, port-forward and proxy upgrades may be the
	// kubelet's or the backend's (origin).
	ans.info.Latency = s.cur.latency
	ans.pick.Done(ans.info)
}

// upgradeSession sends the attempts of one upgrade request.
type upgradeSession struct {
	h     *Handler
	w     http.ResponseWriter
	r     *http.Request
	mode  transport.AuthMode
	proto string
	start time.Time
	cur   *upgradeAttempt // the last attempt
}

// send runs one attempt on addr. The response it returns stands for the
// answer the client already got: only its status is read.
func (s *upgradeSession) send(addr string) (*http.Response, error) {
	s.release()
	a := &upgradeAttempt{h: s.h, addr: addr, mode: s.mode, proto: s.proto, start: s.start, sent: s.h.now()}
	s.cur = a
	a.run(s.w, s.r)
	if status := int(a.status.Load()); status != 0 {
		return &http.Response{StatusCode: status, Body: http.NoBody}, nil
	}
	switch {
	case a.dialErr != nil:
		return nil, a.dialErr
	case a.err == nil:
		// The handler gave up without an answer or an error; it logged
		// why.
		return nil, errors.New("the upgrade ended without a response from kube-apiserver")
	}
	return nil, a.err
}

// release ends the last attempt's tracking, after the balancer heard of
// its end: CloseUpgrades returning means every upgrade has reported.
func (s *upgradeSession) release() {
	if s.cur != nil {
		s.cur.release()
	}
}

// upgradeFailed answers an upgrade that got no response from any apiserver.
func (h *Handler) upgradeFailed(w http.ResponseWriter, r *http.Request, proto, endpoint string, start time.Time, err error) {
	code, reason, msg := describeError(r.Context(), err)
	h.metrics.answered(balancer.Long, code, endpoint, h.now().Sub(start))
	h.metrics.upgraded(proto, resultError)
	if code == statusClientClosedRequest {
		return
	}
	writeStatus(w, code, reason, msg)
}

// upgradeAttempt is one try of an upgrade request against one endpoint. It
// plays three roles for utilproxy.UpgradeAwareHandler, which does the
// protocol work (write the request, read the answer, hijack the client only
// once the apiserver has answered, copy both ways until one side closes):
// its upgrade transport (dial and request headers), its error responder,
// and the wrapper of the client's ResponseWriter that sees the hijack.
//
// All fields but status are written and read on the ServeHTTP goroutine.
type upgradeAttempt struct {
	h     *Handler
	addr  string
	mode  transport.AuthMode
	proto string
	start time.Time // the request's arrival
	sent  time.Time // this attempt's start

	conns *upgradeConns // nil until dialed
	err   error         // what the responder was given
	// dialErr is the dial's own error, typed: the handler passes it to
	// the responder only as text.
	dialErr error
	latency time.Duration // from sending to the answer's status line
	// status is the HTTP status the apiserver answered with, read off the
	// first bytes the handler writes to the hijacked client connection.
	// The handler writes them before it starts its copy goroutines; atomic
	// so that no later write can race with the read in serveUpgrade.
	status atomic.Int32
}

var (
	_ utilproxy.UpgradeRequestRoundTripper = (*upgradeAttempt)(nil)
	_ utilnet.RoundTripperWrapper          = (*upgradeAttempt)(nil)
	_ utilproxy.ErrorResponder             = (*upgradeAttempt)(nil)
)

func (a *upgradeAttempt) run(w http.ResponseWriter, r *http.Request) {
	ua := &utilproxy.UpgradeAwareHandler{
		// Scheme http tells DialURL to use our dialer's connection as it
		// is: DialUpgrade returns it already TLS, with fanout's config. The
		// scheme goes nowhere else; the request line carries only the path.
		Location:           &url.URL{Scheme: "http", Host: a.addr},
		UseRequestLocation: true,
		UseLocationHost:    true,
		UpgradeRequired:    true,
		UpgradeTransport:   a,
		Responder:          a,
	}
	ua.ServeHTTP(&hijackWatcher{ResponseWriter: w, a: a}, r)
	if a.conns != nil {
		a.conns.closeAll()
	}
}

// release ends the attempt's tracking, after the balancer heard of its end:
// CloseUpgrades returning means every upgrade has reported.
func (a *upgradeAttempt) release() {
	if a.conns != nil {
		a.h.upgrades.remove(a.conns)
		a.conns = nil
	}
}

// WrapRequest strips what fanout never forwards and sets the credentials.
// It returns a copy: the handler logs its own clone's headers at high
// verbosity, and fanout's token must not be in them.
func (a *upgradeAttempt) WrapRequest(req *http.Request) (*http.Request, error) {
	out := utilnet.CloneRequest(req)
	// As on the plain path: kube-apiserver would take an X-Forwarded-For
	// (which the handler adds, with 127.0.0.1) as the audit source IP.
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		out.Header.Del(k)
	}
	stripIdentityHeaders(out.Header)
	if err := a.h.upgrader.AuthorizeUpgrade(out.Header, a.mode); err != nil {
		return nil, err
	}
	return out, nil
}

// RoundTrip is never called: the handler only dials through us.
func (a *upgradeAttempt) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("fanout: upgrade transport used for a plain round trip")
}

// WrappedRoundTripper gives DialURL the dialer to use.
func (a *upgradeAttempt) WrappedRoundTripper() http.RoundTripper {
	return &http.Transport{DialContext: a.dial}
}

// dial ignores the address: the attempt always goes to its endpoint.
func (a *upgradeAttempt) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	// Its errors are *transport.UnprocessedError: the attempt policy may
	// send the request elsewhere.
	c, err := a.h.upgrader.DialUpgrade(ctx, a.addr, a.mode)
	if err != nil {
		a.dialErr = err
		return nil, err
	}
	// Until the apiserver answers; the hijack clears it.
	_ = c.SetReadDeadline(a.h.now().Add(upgradeResponseTimeout))
	a.conns = &upgradeConns{backend: c, proto: a.proto, metrics: a.h.metrics}
	if !a.h.upgrades.add(a.conns) {
		c.Close()
		a.dialErr = &transport.UnprocessedError{Endpoint: a.addr, Err: errors.New("fanout is shutting down")}
		return nil, a.dialErr
	}
	// A client that leaves before the answer must not leave us blocked
	// reading it. The request context ends only then, or when ServeHTTP
	// returns: hijacking does not end it.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	a.conns.stop = stop
	return c, nil
}

// Error is the handler's ErrorResponder. A failed dial of the first attempt
// is not answered here: serveUpgrade may retry it elsewhere, and answers
// once it knows the outcome.
func (a *upgradeAttempt) Error(_ http.ResponseWriter, _ *http.Request, err error) {
	if a.err == nil {
		a.err = err
	}
}

// sawStatus records the status line of the first write to the client.
func (a *upgradeAttempt) sawStatus(p []byte) {
	code := http.StatusBadGateway
	// "HTTP/1.1 101 Switching Protocols"
	if rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.")); ok && len(rest) >= 5 && rest[1] == ' ' {
		if n, err := strconv.Atoi(string(rest[2:5])); err == nil {
			code = n
		}
	}
	now := a.h.now()
	a.latency = now.Sub(a.sent)
	a.status.Store(int32(code))
	a.h.metrics.answered(balancer.Long, code, a.addr, now.Sub(a.start))
	if code != http.StatusSwitchingProtocols {
		a.h.metrics.upgraded(a.proto, resultRejected)
		return
	}
	a.h.metrics.upgraded(a.proto, resultUpgraded)
	if a.conns != nil {
		a.conns.upgraded()
	}
}

// hijackWatcher wraps the client's ResponseWriter so the hijacked
// connection is tracked, and data the server buffered is not lost.
type hijackWatcher struct {
	http.ResponseWriter
	a *upgradeAttempt
}

func (hw *hijackWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := hw.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("the client's connection (%T) cannot be hijacked; upgrades need HTTP/1.1", hw.ResponseWriter)
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The server's header deadlines must not cut a session that lasts.
	_ = c.SetDeadline(time.Time{})
	cc := &clientConn{Conn: c, a: hw.a}
	if brw != nil && brw.Reader.Buffered() > 0 {
		// The handler reads the raw connection; what the client sent
		// right behind its request is already in the server's buffer.
		cc.r = brw.Reader
	}
	if hw.a.conns != nil {
		_ = hw.a.conns.backend.SetReadDeadline(time.Time{})
		if !hw.a.h.upgrades.setClient(hw.a.conns, cc) {
			cc.Close() // CloseUpgrades already ran
		}
	}
	return cc, brw, nil
}

// clientConn is the hijacked client connection.
type clientConn struct {
	net.Conn
	a     *upgradeAttempt
	r     *bufio.Reader // drained first when the server had buffered data
	wrote atomic.Bool
}

func (c *clientConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

func (c *clientConn) Write(p []byte) (int, error) {
	if !c.wrote.Swap(true) {
		c.a.sawStatus(p)
	}
	return c.Conn.Write(p)
}

// upgradeConns are the two connections of one upgrade request.
type upgradeConns struct {
	backend net.Conn
	client  net.Conn // nil until hijacked
	stop    func() bool
	proto   string
	metrics *Metrics
	gauge   bool // counted in fanout_upgraded_connections
	once    sync.Once
}

// upgraded counts u in the gauge; called once, on the ServeHTTP goroutine,
// before remove.
func (u *upgradeConns) upgraded() {
	u.gauge = true
	u.metrics.upgrades.open.WithLabelValues(u.proto).Inc()
}

// closeAll closes both connections; safe to call more than once and from
// any goroutine.
func (u *upgradeConns) closeAll() {
	u.once.Do(func() {
		if u.stop != nil {
			u.stop()
		}
		_ = u.backend.Close()
	})
}

// upgradeSet tracks the connections of upgrade requests, from dial to
// end: http.Server.Shutdown forgets a connection once it is hijacked, so
// the grace period and the final close are ours to enforce. Its zero value
// is empty and open. Methods are safe for concurrent use; mu is held only
// to change the set, never during I/O.
type upgradeSet struct {
	mu     sync.Mutex
	conns  map[*upgradeConns]struct{}
	closed bool
	empty  chan struct{} // closed when conns becomes empty; nil when nobody waits
}

// add registers u; false once CloseUpgrades gave up waiting.
func (s *upgradeSet) add(u *upgradeConns) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = map[*upgradeConns]struct{}{}
	}
	s.conns[u] = struct{}{}
	return true
}

// setClient records the hijacked client connection of u; false when u was
// already closed by CloseUpgrades.
func (s *upgradeSet) setClient(u *upgradeConns, c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.conns[u]; !ok {
		return false
	}
	u.client = c
	return true
}

func (s *upgradeSet) remove(u *upgradeConns) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.conns[u]; !ok {
		return
	}
	delete(s.conns, u)
	if u.gauge {
		u.metrics.upgrades.open.WithLabelValues(u.proto).Dec()
	}
	if len(s.conns) == 0 && s.empty != nil {
		close(s.empty)
		s.empty = nil
	}
}

// CloseUpgrades waits until every upgraded connection has ended by itself
// or ctx is done, then closes those still open (both their client and
// apiserver sides) and refuses new ones. It returns ctx's error when it had
// to close any. Server.Stop calls it after Shutdown, with what is left of
// the shutdown grace.
func (h *Handler) CloseUpgrades(ctx context.Context) error {
	s := &h.upgrades
	s.mu.Lock()
	if len(s.conns) == 0 {
		s.closed = true
		s.mu.Unlock()
		return nil
	}
	if s.empty == nil {
		s.empty = make(chan struct{})
	}
	empty := s.empty
	s.mu.Unlock()

	select {
	case <-empty:
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.closed = true
	open := make([]*upgradeConns, 0, len(s.conns))
	var clients []net.Conn
	for u := range s.conns {
		open = append(open, u)
		if u.client != nil {
			clients = append(clients, u.client)
		}
	}
	s.mu.Unlock()
	// Closing both sides ends the handler's copy loops; each request's own
	// cleanup then removes its entry from the set.
	for _, c := range clients {
		_ = c.Close()
	}
	for _, u := range open {
		u.closeAll()
	}
	if len(open) == 0 {
		return nil
	}
	return ctx.Err()
}
