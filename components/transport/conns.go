package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/fanout-dev/fanout/internal/h2conn"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// A generation's connections: every request a pool sends to its
// apiserver goes through one of them (upgrades excepted: upgrade.go dials
// HTTP/1.1). Each is a connection of fanout's own HTTP/2 client
// (internal/h2conn) or, with Config.Client ClientStd, of net/http's
// (stdconn.go); this file picks one below the server's stream limit
// for a request, dials one (shared by the requests that wait for it) when
// none can take it, and drops those that went away or closed.

// upstreamConn is one HTTP/2 connection of a generation: *h2conn.Conn or
// *stdConn. Its methods are safe for concurrent use.
type upstreamConn interface {
	// CanTakeStream reports whether a RoundTrip now would likely get a
	// stream. It is called with h2Conns.mu held, so it calls back
	// nothing.
	CanTakeStream() bool
	// InFlight is how many streams the connection carries.
	InFlight() int
	// RoundTrip sends req. An error for which notWritten holds means
	// nothing of req was written: another connection may take it.
	RoundTrip(*http.Request) (*http.Response, error)
	// CloseWhenIdle makes the connection take no new stream and close
	// once its last stream ends. It may call back into the pool (remove).
	CloseWhenIdle()
}

var (
	_ upstreamConn = (*h2conn.Conn)(nil)
	_ upstreamConn = (*stdConn)(nil)
)

// notWritten reports whether err, from upstreamConn.RoundTrip, says that
// nothing of the request was written.
func notWritten(err error) bool {
	return errors.Is(err, h2conn.ErrConnClosing) || errors.Is(err, errStdNotWritten)
}

// maxConnsPerPool bounds the connections of one generation. fanout's
// own limits allow about 5,100 streams in flight (--max-inflight and
// --max-long-running); at kube-apiserver's 100 streams per connection they
// fit in 51 connections. A server that allows fewer streams gets no more
// connections: requests past them fail as unprocessed, so the proxy sends
// them to another endpoint.
const maxConnsPerPool = 64

// h2Conns is the set of connections of one generation (one endpoint, one
// client certificate).
type h2Conns struct {
	g *generation

	mu      sync.Mutex
	conns   []upstreamConn
	dialing *h2Dial // a dial in progress that requests wait on
}

type h2Dial struct {
	done chan struct{}
	cc   upstreamConn
	err  error
}

// roundTrip sends req on a connection that can take a stream, dialing
// one if none can.
func (cs *h2Conns) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for tries := 1; ; tries++ {
		cc, err := cs.get(ctx)
		if err != nil {
			closeReqBody(req)
			return nil, err
		}
		res, err := send(cc, req)
		if notWritten(err) {
			if ctx.Err() == nil && tries < maxConnTries {
				// Nothing was written: another connection may take it.
				continue
			}
			closeReqBody(req)
			if ctx.Err() == nil {
				// A server whose fresh connections take no stream.
				return nil, &UnprocessedError{Endpoint: cs.g.p.key.address, Err: err, Refused: true}
			}
		}
		return res, err
	}
}

// send sends req on cc. A short request (what kube-apiserver does not
// treat as long-running) starts with a larger window while the answer
// window budget has room, so that its answer needs no round trip to grow
// it; a watch does not, as an idle one would hold it until its next event.
// (net/http's client, --upstream-http2 std, has no such start.)
func send(cc upstreamConn, req *http.Request) (*http.Response, error) {
	if own, ok := cc.(*h2conn.Conn); ok {
		if r := reqinfo.RequestFrom(req.Context()); r != nil && !r.LongRunning {
			return own.RoundTripShort(req)
		}
	}
	return cc.RoundTrip(req)
}

// maxConnTries bounds the connections a request tries that turn out to
// take no stream (taken by another request meanwhile, or a server whose
// SETTINGS allow none), so that such a server costs a request a few dials,
// not a dial loop until its deadline.
const maxConnTries = 3

// errPoolFull says every connection a pool may hold is at its server's
// stream limit.
var errPoolFull = fmt.Errorf("all %d connections at the server's stream limit (SETTINGS_MAX_CONCURRENT_STREAMS); try another endpoint", maxConnsPerPool)

func (cs *h2Conns) get(ctx context.Context) (upstreamConn, error) {
	cs.mu.Lock()
	var useless []upstreamConn
	for i := 0; i < len(cs.conns); i++ {
		cc := cs.conns[i]
		if cc.CanTakeStream() {
			cs.mu.Unlock()
			closeAll(useless)
			return cc, nil
		}
		if cc.InFlight() == 0 {
			// Open but allowed no stream (MAX_CONCURRENT_STREAMS 0):
			// kept, it would only hold a TLS connection until its idle
			// timeout.
			useless = append(useless, cc)
			cs.conns = append(cs.conns[:i], cs.conns[i+1:]...)
			i--
		}
	}
	d := cs.dialing
	if d == nil && len(cs.conns) >= maxConnsPerPool {
		cs.mu.Unlock()
		closeAll(useless)
		return nil, &UnprocessedError{Endpoint: cs.g.p.key.address, Err: errPoolFull, Refused: true}
	}
	if d == nil {
		d = &h2Dial{done: make(chan struct{})}
		cs.dialing = d
		go cs.dial(d)
	}
	cs.mu.Unlock()
	closeAll(useless)
	select {
	case <-d.done:
	case <-ctx.Done():
		// The caller gave up, not the endpoint: the dial goes on for
		// the others.
		return nil, ctx.Err()
	}
	if d.err != nil {
		return nil, d.err
	}
	return d.cc, nil
}

// dial opens a connection for every request that waits on d. It runs on
// its own goroutine, so that one request giving up does not fail the
// others.
func (cs *h2Conns) dial(d *h2Dial) {
	g := cs.g
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-g.p.t.done:
			cancel()
		case <-d.done:
		}
	}()
	var cc upstreamConn
	var err error
	if g.std != nil {
		cc, err = cs.dialStd(ctx)
	} else {
		cc, err = cs.dialOwn(ctx)
	}
	cancel()
	cs.mu.Lock()
	cs.dialing = nil
	if cc != nil {
		cs.conns = append(cs.conns, cc)
	}
	cs.mu.Unlock()
	d.cc, d.err = cc, err
	close(d.done)
}

// dialOwn dials a connection of fanout's own client.
func (cs *h2Conns) dialOwn(ctx context.Context) (upstreamConn, error) {
	g := cs.g
	nc, err := g.dialTLS(ctx)
	if err != nil {
		return nil, err
	}
	cfg := g.p.t.cfg.conn()
	remove := func(cc *h2conn.Conn) { cs.remove(cc) }
	cfg.OnGoAway, cfg.OnClose = remove, remove
	cc, err := h2conn.New(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, &UnprocessedError{Endpoint: g.p.key.address, Err: err}
	}
	return cc, nil
}

func (cs *h2Conns) remove(cc upstreamConn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, c := range cs.conns {
		if c == cc {
			cs.conns = append(cs.conns[:i], cs.conns[i+1:]...)
			return
		}
	}
}

// closeIdle closes the connections that carry no stream, and makes the
// others close when their last stream ends.
func (cs *h2Conns) closeIdle() {
	cs.mu.Lock()
	conns := append([]upstreamConn(nil), cs.conns...)
	cs.mu.Unlock()
	for _, cc := range conns {
		cc.CloseWhenIdle()
	}
}

// closeAll closes conns once nothing holds the pool's lock: their
// OnClose (remove) takes it.
func closeAll(conns []upstreamConn) {
	for _, cc := range conns {
		cc.CloseWhenIdle()
	}
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
