package h2conn

import (
	"errors"
	"math"
	"time"
)

// Config configures one connection. The zero value of every field means
// its default; a pool builds one Config for all its connections and sets
// the callbacks.
type Config struct {
	// MaxReceiveBufferPerStream is the flow-control window granted to
	// each response stream (SETTINGS_INITIAL_WINDOW_SIZE), and
	// MaxReceiveBufferPerConnection the window of the whole connection,
	// granted on top of the initial 65,535 bytes. The stream window bounds
	// what an unread response holds; the connection window must cover the
	// streams that may stay unread together, since it comes back only as
	// bodies are read or closed (as with x/net). Defaults
	// DefaultMaxReceiveBufferPerStream and StreamsPerConnectionWindow
	// stream windows, capped at MaxConnectionWindow.
	MaxReceiveBufferPerStream     int
	MaxReceiveBufferPerConnection int

	// WindowBudget, if set, bounds in sum the stream windows granted
	// beyond MinReceiveBufferPerStream, shared by every connection given
	// it: a stream starts with MinReceiveBufferPerStream (the
	// SETTINGS_INITIAL_WINDOW_SIZE then) and grows toward
	// MaxReceiveBufferPerStream only with bytes taken from the budget,
	// while its reader keeps up with a server that fills its window. It
	// gives them back as its reader stops needing them, and all of them
	// once its data is read or dropped (the body read to its end or
	// closed, the stream reset, the connection lost). What unread answers
	// hold is then at most MinReceiveBufferPerStream per stream plus the
	// budget. Nil: each stream gets MaxReceiveBufferPerStream up front.
	WindowBudget Budget
	// MinReceiveBufferPerStream is the window every stream gets whatever
	// the budget (only with WindowBudget). Default
	// DefaultMinReceiveBufferPerStream.
	MinReceiveBufferPerStream int
	// ShortAnswerWindow is the window a short request's stream
	// (RoundTripShort) starts with while the WindowBudget has room: its
	// answer then needs no round trip to grow it. Default
	// DefaultShortAnswerWindow; below MinReceiveBufferPerStream it is
	// that (no grant).
	ShortAnswerWindow int

	// ReadIdleTimeout is how long the connection may stay silent before
	// a PING is sent, and PingTimeout how long the PING may go unanswered
	// (or a write make no progress) before the connection is closed.
	ReadIdleTimeout time.Duration
	PingTimeout     time.Duration

	// IdleConnTimeout closes the connection once it has carried no stream
	// for this long.
	IdleConnTimeout time.Duration

	// PrefaceTimeout bounds writing the client preface and SETTINGS in
	// New. Default DefaultPrefaceTimeout.
	PrefaceTimeout time.Duration

	// OnGoAway is called when a GOAWAY came: the connection takes no new
	// stream, while the streams the server accepted go on. OnClose is
	// called once, after the connection closed, whatever closed it (an
	// error, a PING unanswered, IdleConnTimeout, CloseWhenIdle, Close). A
	// pool drops the connection from its set in either. They run on
	// whichever goroutine noticed (the reading one, the timer's, or a
	// caller's in RoundTrip, a body's Read or Close, CloseWhenIdle or
	// Close), with none of the connection's locks held; they must not
	// block, and the caller must not hold a lock they take while calling
	// those methods.
	OnGoAway func(*Conn)
	OnClose  func(*Conn)
}

// Budget is a byte budget shared by connections (internal/budget.Bytes):
// Take reserves n bytes and reports whether they fitted, Give returns
// them. Both are called with a connection's lock held; they must not
// block.
type Budget interface {
	Take(n int64) bool
	Give(n int64)
}

// Defaults of Config.
const (
	DefaultReadIdleTimeout           = 5 * time.Second
	DefaultPingTimeout               = 3 * time.Second
	DefaultIdleConnTimeout           = 90 * time.Second
	DefaultPrefaceTimeout            = 5 * time.Second
	DefaultMaxReceiveBufferPerStream = 1 << 20
	// DefaultMinReceiveBufferPerStream is the window every stream starts
	// with, and keeps when the WindowBudget is spent: most watch events
	// fit it. Times every stream in flight (5,096 in the sidecar) it is
	// what unread answers may hold beyond the budget (docs/security.md,
	// "The sum of the memory bounds"), so it is small; a stream the
	// window slows grows it from the budget after its first window.
	DefaultMinReceiveBufferPerStream = 2 << 10
	// DefaultShortAnswerWindow is HTTP/2's own initial window: a 16 KiB
	// answer over a 1 ms round trip took 5.1 ms from the 2 KiB floor and
	// 1.6 ms with the whole window up front
	// (BenchmarkAnswerLatency). Long-running requests (watches) get
	// none: an idle watch would hold it until its next event.
	DefaultShortAnswerWindow = 64 << 10
	// StreamsPerConnectionWindow is how many full stream windows the
	// default connection window holds: ten times the 100 streams per
	// connection servers such as kube-apiserver allow by default, so
	// unread streams cannot use it up.
	StreamsPerConnectionWindow           = 1000
	DefaultMaxReceiveBufferPerConnection = StreamsPerConnectionWindow * DefaultMaxReceiveBufferPerStream
)

// InitialWindow is HTTP/2's initial window (RFC 9113 6.9.2). Windows
// only grow from it, so a connection window below it cannot be
// announced.
const InitialWindow = 65535

// MaxConnectionWindow is the largest MaxReceiveBufferPerConnection: it is
// granted on top of InitialWindow, and HTTP/2 windows end at 2^31-1.
const MaxConnectionWindow = math.MaxInt32 - InitialWindow

// WithDefaults returns c with zero (or negative) fields set to defaults,
// or an error that starts with the name of the field that cannot work
// (a caller prefixes it with its own "Config.").
func (c Config) WithDefaults() (Config, error) {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setDur(&c.ReadIdleTimeout, DefaultReadIdleTimeout)
	setDur(&c.PingTimeout, DefaultPingTimeout)
	setDur(&c.IdleConnTimeout, DefaultIdleConnTimeout)
	setDur(&c.PrefaceTimeout, DefaultPrefaceTimeout)
	if c.MaxReceiveBufferPerStream <= 0 {
		c.MaxReceiveBufferPerStream = DefaultMaxReceiveBufferPerStream
	}
	if c.MinReceiveBufferPerStream <= 0 {
		c.MinReceiveBufferPerStream = min(DefaultMinReceiveBufferPerStream, c.MaxReceiveBufferPerStream)
	}
	if c.ShortAnswerWindow <= 0 {
		c.ShortAnswerWindow = min(DefaultShortAnswerWindow, c.MaxReceiveBufferPerStream)
	}
	c.ShortAnswerWindow = max(c.ShortAnswerWindow, c.MinReceiveBufferPerStream)
	if c.MaxReceiveBufferPerConnection <= 0 {
		c.MaxReceiveBufferPerConnection = int(min(int64(StreamsPerConnectionWindow)*int64(c.MaxReceiveBufferPerStream), MaxConnectionWindow))
	}
	switch {
	case c.MaxReceiveBufferPerConnection < InitialWindow:
		return c, errors.New("MaxReceiveBufferPerConnection must be at least 65535 bytes (the HTTP/2 initial window)")
	case c.MaxReceiveBufferPerConnection > MaxConnectionWindow:
		return c, errors.New("MaxReceiveBufferPerConnection exceeds 2^31-1 minus the 65,535-byte initial window, the largest HTTP/2 connection window")
	case c.MinReceiveBufferPerStream > c.MaxReceiveBufferPerStream:
		return c, errors.New("MinReceiveBufferPerStream exceeds MaxReceiveBufferPerStream")
	case c.ShortAnswerWindow > c.MaxReceiveBufferPerStream:
		return c, errors.New("ShortAnswerWindow exceeds MaxReceiveBufferPerStream")
	case c.MaxReceiveBufferPerStream > c.MaxReceiveBufferPerConnection:
		return c, errors.New("MaxReceiveBufferPerStream exceeds MaxReceiveBufferPerConnection; one stream could never use its whole window")
	}
	return c, nil
}
