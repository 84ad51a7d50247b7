package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// by this request alone. It is not among the long-running bodies that
// StopLongRunning ends at the start of a shutdown, and the watch
// rebalancer never sees it (it tracks watch bodies only); it never rides
// the HTTP/2 pools, so it takes no stream there. Only its two peers end
// it, or CloseUpgrades when the shutdown grace has run out.
func (h *Handler) serveUpgrade(w http.ResponseWriter, r *http.Request, st *reqState) {
	proto := upgradeProtocol(r)
	if h.upgrader == nil {
		st.outcome.Code = http.StatusNotImplemented
		h.metrics.answered(balancer.Long, http.StatusNotImplemented, "", time.Since(st.Start))
		h.metrics.upgraded(proto, resultError)
		writeStatus(w, http.StatusNotImplemented, statusReasonUnknown,
			"fanout: this fanout's upstream cannot dial HTTP/1.1 connections for upgrade requests (exec/attach/port-forward)")
		return
	}
	h.metrics.openLong.Inc()
	defer h.metrics.openLong.Dec()

	s := &upgradeSession{h: h, w: w, r: r, mode: st.Mode, proto: proto, start: st.Start}
	defer s.release()
	a := h.newAttempts(r, st, outBody{replayable: true})
	a.upgrade = s
	// Whatever its path, an upgrade holds its connection for as long as
	// the session lasts.
	a.pick.Kind = balancer.Long
	ans, err := a.run()
	if err != nil {
		st.outcome.Code = h.upgradeFailed(w, r, proto, st.endpoint, st.Start, err)
		return
	}
	st.outcome.Code = ans.resp.StatusCode
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
	a := &upgradeAttempt{h: s.h, addr: addr, mode: s.mode, proto: s.proto, start: s.start, sent: time.Now()}
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

// upgradeFailed answers an upgrade that got no response from any
// apiserver, and returns the status it answered with.
func (h *Handler) upgradeFailed(w http.ResponseWriter, r *http.Request, proto, endpoint string, start time.Time, err error) int {
	code, reason, msg := describeError(r.Context(), err)
	h.metrics.answered(balancer.Long, code, endpoint, time.Since(start))
	h.metrics.upgraded(proto, resultError)
	if code == statusClientClosedRequest {
		return code
	}
	writeStatus(w, code, reason, msg)
	return code
}

// upgradeAttempt is one try of an upgrade request against one endpoint:
// dial, write the request, read the answer, and only once the apiserver
// has answered hijack the client's connection, pass the answer on, and
// relay both ways until one side closes. This is what apimachinery's
// UpgradeAwareHandler does for kube-apiserver's own exec and port-forward
// proxying, done here without linking it (docs/footprint.md).
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
	// err is why the attempt got no answer; nil once it has one.
	err error
	// dialErr is the dial's own error, typed (*transport.UnprocessedError):
	// the attempt policy may send the request elsewhere.
	dialErr error
	latency time.Duration // from sending to the answer's status line
	// status is the HTTP status the apiserver answered with, once it has
	// been passed on to the client. Atomic so that no later write can
	// race with the read in serveUpgrade.
	status atomic.Int32
}

// upgradeErrorDeadline bounds passing an error answer on: the client and
// the apiserver get that long to take and give its body.
const upgradeErrorDeadline = 10 * time.Second

func (a *upgradeAttempt) run(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if a.conns != nil {
			a.conns.closeAll()
		}
	}()
	out, err := a.request(r)
	if err != nil {
		a.err = err
		return
	}
	backend, err := a.dial(r.Context())
	if err != nil {
		a.err = fmt.Errorf("error dialing backend: %w", err)
		return
	}
	if err := out.Write(backend); err != nil {
		a.err = fmt.Errorf("error sending request: %w", err)
		return
	}
	// raw keeps every byte read from the apiserver while reading its
	// answer's head, so that a 101 goes to the client as it came, with
	// whatever followed it in the same reads (the first frames of the
	// upgraded protocol).
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(backend, &raw))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		a.err = err
		return
	}
	answered := time.Now()
	code := resp.StatusCode
	if code != http.StatusSwitchingProtocols && code < 400 {
		// Neither switched nor refused: nothing a client could use.
		a.err = fmt.Errorf("invalid upgrade response: status code %d", code)
		return
	}
	// Once the connection is hijacked no error answer can be written: it
	// is the last step before passing the answer on.
	client, buffered, err := a.hijack(w)
	if err != nil {
		a.err = err
		return
	}
	defer client.Close()
	a.answered(code, answered)
	if code != http.StatusSwitchingProtocols {
		// An error status, often the kubelet's: the client gets it as
		// the apiserver wrote it, and the connection ends with it.
		deadline := time.Now().Add(upgradeErrorDeadline)
		_ = backend.SetReadDeadline(deadline)
		_ = client.SetWriteDeadline(deadline)
		_ = resp.Write(client)
		return
	}
	if _, err := client.Write(raw.Bytes()); err != nil {
		return
	}
	a.relay(client, buffered, backend)
}

// release ends the attempt's tracking, after the balancer heard of its end:
// CloseUpgrades returning means every upgrade has reported.
func (a *upgradeAttempt) release() {
	if a.conns != nil {
		a.h.upgrades.remove(a.conns)
		a.conns = nil
	}
}

// request is the request as it goes to the apiserver: the client's path
// and headers, without what fanout never forwards, with mode's
// credentials. It is a copy: the client's own request is logged, and
// fanout's token must not be in it.
func (a *upgradeAttempt) request(r *http.Request) (*http.Request, error) {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host = "", ""
	// The endpoint's address, as any HTTP client would name it.
	out.Host = a.addr
	// As on the plain path: kube-apiserver would take an X-Forwarded-For
	// as the audit source IP.
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		out.Header.Del(k)
	}
	stripIdentityHeaders(out.Header)
	if err := a.h.upgrader.AuthorizeUpgrade(out.Header, a.mode); err != nil {
		return nil, err
	}
	return out, nil
}

// dial opens the attempt's connection to its endpoint.
func (a *upgradeAttempt) dial(ctx context.Context) (net.Conn, error) {
	// Its errors are *transport.UnprocessedError: the attempt policy may
	// send the request elsewhere.
	c, err := a.h.upgrader.DialUpgrade(ctx, a.addr, a.mode)
	if err != nil {
		a.dialErr = err
		return nil, err
	}
	// Until the apiserver answers; the hijack clears it.
	_ = c.SetReadDeadline(time.Now().Add(upgradeResponseTimeout))
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

// hijack takes the client's connection over. buffered is what the client
// sent right behind its request, which the server had already read, or
// nil.
func (a *upgradeAttempt) hijack(w http.ResponseWriter) (c net.Conn, buffered *bufio.Reader, err error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("the client's connection (%T) cannot be hijacked; upgrades need HTTP/1.1", w)
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("error hijacking connection: %w", err)
	}
	// The server's header deadlines must not cut a session that lasts.
	_ = c.SetDeadline(time.Time{})
	if brw != nil && brw.Reader.Buffered() > 0 {
		buffered = brw.Reader
	}
	if a.conns != nil {
		_ = a.conns.backend.SetReadDeadline(time.Time{})
		if !a.h.upgrades.setClient(a.conns, c) {
			c.Close() // CloseUpgrades already ran
		}
	}
	return c, buffered, nil
}

// answered records the apiserver's answer, now on its way to the client.
func (a *upgradeAttempt) answered(code int, at time.Time) {
	a.latency = at.Sub(a.sent)
	a.status.Store(int32(code))
	a.h.metrics.answered(balancer.Long, code, a.addr, at.Sub(a.start))
	if code != http.StatusSwitchingProtocols {
		a.h.metrics.upgraded(a.proto, resultRejected)
		return
	}
	a.h.metrics.upgraded(a.proto, resultUpgraded)
	if a.conns != nil {
		a.conns.upgraded()
	}
}

// relay copies both ways, the client's input on a goroutine of its own and
// the apiserver's output on this one, until either side ends; then it
// closes both connections, which ends the other copy, and waits for it.
// A side that closes its sending half (a TCP FIN) ends the session like
// one that closes: exec, attach and port-forward run SPDY or WebSocket
// over the connection, which signal the end of a stream inside the
// protocol and take the end of the connection for the end of the session.
func (a *upgradeAttempt) relay(client net.Conn, buffered *bufio.Reader, backend net.Conn) {
	var in io.Reader = client
	if buffered != nil {
		in = io.MultiReader(io.LimitReader(buffered, int64(buffered.Buffered())), client)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(backend, in)
		_ = client.Close()
		a.conns.closeAll()
	}()
	_, _ = io.Copy(client, backend)
	_ = client.Close()
	a.conns.closeAll()
	<-done
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
// to close any. listener.Server.Stop calls it after Shutdown, with what is left of
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
