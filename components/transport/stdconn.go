package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

// net/http's HTTP/2 client as the connections of a generation
// (Config.Client ClientStd), so that it can be measured against fanout's
// own: one http.ClientConn per connection, dialled through the
// generation's TLS dialer, so that the client certificate, its rotation
// and the server's verification stay this package's. What it lacks: the
// answer window budget (every stream gets MaxReceiveBufferPerStream up
// front), and a connection that received a GOAWAY stays in the
// generation's set, taking no stream, until its last stream ends (net/http
// tells of no GOAWAY; only the close comes through the state hook).

// newStdTransport is the http.Transport that dials g's connections. It
// keeps no connection itself: NewClientConn's are the pool's.
func (g *generation) newStdTransport() *http.Transport {
	cfg := g.p.t.cfg
	protocols := new(http.Protocols)
	protocols.SetHTTP2(true)
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := g.dialTLS(ctx)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Protocols:       protocols,
		IdleConnTimeout: cfg.IdleConnTimeout,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     cfg.MaxReceiveBufferPerStream,
			MaxReceiveBufferPerConnection: cfg.MaxReceiveBufferPerConnection,
			SendPingTimeout:               cfg.ReadIdleTimeout,
			PingTimeout:                   cfg.PingTimeout,
			// As h2conn: a write that makes no progress for a PING's
			// time closes the connection.
			WriteByteTimeout: cfg.PingTimeout,
		},
	}
}

// dialStd dials a connection of net/http's client.
func (cs *h2Conns) dialStd(ctx context.Context) (upstreamConn, error) {
	g := cs.g
	cc, err := g.std.NewClientConn(ctx, "https", g.p.key.address)
	if err != nil {
		if !IsUnprocessed(err) {
			// The TLS connection came up (the dialer's errors are
			// UnprocessedError already) but the HTTP/2 preface failed.
			err = &UnprocessedError{Endpoint: g.p.key.address, Err: err}
		}
		return nil, err
	}
	// Until the server's SETTINGS arrive net/http assumes 100 streams,
	// and a request reserved past the server's real limit waits for a
	// stream to end instead of going to another connection: wait for them
	// with a PING, which the server answers after its SETTINGS. (A
	// ":ping" request without URL is net/http's way to send one, kept for
	// x/net's ClientConn.Ping.)
	pctx, cancel := context.WithTimeout(ctx, g.p.t.cfg.DialTimeout)
	_, err = cc.RoundTrip((&http.Request{Method: ":ping"}).WithContext(pctx))
	cancel()
	if err != nil {
		cc.Close()
		return nil, &UnprocessedError{Endpoint: g.p.key.address, Err: fmt.Errorf("waiting for the server's HTTP/2 SETTINGS: %w", err)}
	}
	sc := &stdConn{cc: cc, cs: cs}
	cc.SetStateHook(sc.stateChanged)
	return sc, nil
}

// stdConn is an http.ClientConn as an upstreamConn. net/http's RoundTrip
// waits when the connection is at the server's stream limit; RoundTrip
// here reserves a stream first, so that a full connection sends the
// request to another one instead.
type stdConn struct {
	cc *http.ClientConn
	cs *h2Conns
	// closing is set by CloseWhenIdle: no new stream, and the state hook
	// closes the connection when its last stream ends.
	closing atomic.Bool
}

func (c *stdConn) CanTakeStream() bool { return !c.closing.Load() && c.cc.Available() > 0 }

func (c *stdConn) InFlight() int { return c.cc.InFlight() }

func (c *stdConn) CloseWhenIdle() {
	c.closing.Store(true)
	// A stream that ends after this check runs the state hook, which
	// sees closing.
	if c.cc.InFlight() == 0 {
		c.cc.Close()
	}
}

// stateChanged is the ClientConn's state hook: it runs when a stream ends
// or the connection closes, never with h2Conns.mu held (the pool calls
// nothing that runs it under its lock).
func (c *stdConn) stateChanged(cc *http.ClientConn) {
	if cc.Err() != nil {
		c.cs.remove(c)
		return
	}
	if c.closing.Load() && cc.InFlight() == 0 {
		cc.Close()
	}
}

// errStdNotWritten is wrapped in the error of a stdConn's RoundTrip that
// wrote nothing: no stream to reserve, or net/http found the connection
// unusable before writing.
var errStdNotWritten = errors.New("net/http HTTP/2 connection took no stream")

func (c *stdConn) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.closing.Load() {
		return nil, errStdNotWritten
	}
	if err := c.cc.Reserve(); err != nil {
		return nil, fmt.Errorf("%w: %w", errStdNotWritten, err)
	}
	res, err := c.cc.RoundTrip(req)
	if err != nil {
		return nil, c.classify(req, err)
	}
	return res, nil
}

// Errors of net/http's HTTP/2 client (net/http/internal/http2) that prove
// the server did not process a request. They are unexported, so they are
// known by their text; TestStdErrorsRecognised provokes each, so a Go
// release that rewords one fails it. A REFUSED_STREAM needs nothing here:
// net/http's StreamError converts to x/net's (errors.As), which classify
// recognises.
const (
	// errClientConnUnusable and errClientConnNotEstablished: the
	// connection was closing, gone away or closed before the request's
	// HEADERS were written.
	stdUnusable       = "http2: client conn not usable"
	stdNotEstablished = "http2: client conn could not be established"
	// errClientConnGotGoAway: a stream above a graceful GOAWAY's last
	// stream ID.
	stdGoneAway = "http2: Transport received Server's graceful shutdown GOAWAY"
	// The first stream of a connection above the last stream ID of a
	// GOAWAY with an error code (net/http does not retry it on another
	// connection, but the server did not process it either).
	stdGoneAwayFirst = "http2: Transport received GOAWAY from server ErrCode:"
)

// classify maps net/http's errors that prove the request unprocessed:
// unwritten ones to errStdNotWritten, so that the pool tries another
// connection, and a stream turned away by a GOAWAY to an
// UnprocessedError. net/http closed the request's body in either case: an
// unwritten request with a body is returned unprocessed too, since the
// pool cannot send that body again (the proxy, which keeps it, can).
func (c *stdConn) classify(req *http.Request, err error) error {
	msg := err.Error()
	switch {
	case msg == stdUnusable || msg == stdNotEstablished:
		if req.Body == nil || req.Body == http.NoBody {
			return fmt.Errorf("%w: %w", errStdNotWritten, err)
		}
	case msg == stdGoneAway || strings.HasPrefix(msg, stdGoneAwayFirst):
	default:
		return err
	}
	return &UnprocessedError{Endpoint: c.cs.g.p.key.address, Err: err, Refused: true}
}
