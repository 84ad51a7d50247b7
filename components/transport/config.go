package transport

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/h2conn"
)

// Config configures the upstream connections. The zero value of every field
// but ServerName means its default.
type Config struct {
	// ServerName is the name verified in every endpoint's serving
	// certificate: the kubeconfig server's host, or --tls-server-name.
	// Endpoints are dialed by address (often an IP) but all serve the same
	// certificate, so one name fits them all. Required.
	ServerName string

	// DialTimeout bounds the TCP connect and the TLS handshake together.
	// Default 5s.
	DialTimeout time.Duration

	// ReadIdleTimeout is how long a connection may stay silent before an
	// HTTP/2 PING is sent, and PingTimeout how long the PING may go
	// unanswered before the connection is closed. With the defaults (5s and
	// 3s) a peer that vanished without a FIN or RST (node down, network
	// partition, conntrack loss) is noticed within about 8s instead of the
	// minutes TCP keepalive takes, so watches on it end and are re-made on
	// another apiserver.
	ReadIdleTimeout time.Duration
	PingTimeout     time.Duration

	// MaxReceiveBufferPerStream is the HTTP/2 flow-control window fanout
	// grants each response stream, and MaxReceiveBufferPerConnection the
	// window of a whole connection. Defaults 1 MiB, and 1,000 times the
	// stream window (capped at 2^31-1 minus 65,535) for the connection.
	//
	// The stream window is the memory bound: a response nobody reads (a
	// controller reading a watch slowly, a LIST read later) stalls its own
	// stream once it holds that much, and the apiserver stops sending on
	// it. Buffers only grow with data that is actually unread, so a
	// connection holds at most its unread streams times the stream window.
	//
	// The connection window must not be smaller than that: the client
	// (internal/h2conn, as x/net's before it) gives connection window back
	// only when a body is read or closed, so unread streams
	// that together hold the whole connection window stop every other
	// stream on the connection, healthy watches included (the apiserver
	// then closes those watchers as unresponsive, and even their end waits
	// behind the exhausted window). kube-apiserver allows 100 streams per
	// connection unless --http2-max-streams-per-connection says otherwise;
	// 1,000 stream windows cover that. TestUnreadStreamsDoNotStarveTheConnection
	// (internal/h2conn) reproduces the starvation with 16 MiB (this
	// package's earlier default) and 24 unread streams.
	//
	// With an AnswerWindowBudget (the default) a stream's window starts
	// at h2conn.DefaultMinReceiveBufferPerStream (2 KiB) and grows to
	// MaxReceiveBufferPerStream only with bytes of the budget.
	MaxReceiveBufferPerStream     int
	MaxReceiveBufferPerConnection int

	// AnswerWindowBudget bounds in sum the response stream windows
	// granted past the 2 KiB every stream gets (--answer-window-budget):
	// what answers nobody reads can make fanout hold, all streams of all
	// connections together, is then 2 KiB per stream plus this. A stream
	// whose reader keeps up with the apiserver grows its window (doubling,
	// up to MaxReceiveBufferPerStream) with bytes of it, and gives them
	// back as it stops needing them and when it ends. 0 is
	// AutoAnswerWindowBudget of the process's Go memory limit; negative:
	// no budget, every stream gets MaxReceiveBufferPerStream up front.
	AnswerWindowBudget int64
	// WindowBudget, if set, is the budget itself, shared with other
	// Transports (the engine's probes share the requests'); New makes one
	// of AnswerWindowBudget bytes otherwise.
	WindowBudget *budget.Bytes

	// IdleConnTimeout closes a connection that has carried no stream for
	// this long. Default 90s.
	IdleConnTimeout time.Duration

	// Client is the HTTP/2 client of the upstream connections
	// (--upstream-http2): ClientOwn (the default) or ClientStd. It exists
	// to measure one against the other; ClientStd has no answer window
	// budget (AnswerWindowBudget and WindowBudget do not apply to it).
	Client Client
}

// Client names an HTTP/2 client implementation (Config.Client).
type Client string

const (
	// ClientOwn is fanout's own HTTP/2 client, internal/h2conn.
	ClientOwn Client = "own"
	// ClientStd is net/http's, one http.ClientConn per connection
	// (Transport.NewClientConn).
	ClientStd Client = "std"
)

// Validate says what is wrong with c, in terms of the flag.
func (c Client) Validate() error {
	switch c {
	case "", ClientOwn, ClientStd:
		return nil
	}
	return fmt.Errorf("--upstream-http2 must be %q or %q, got %q", ClientOwn, ClientStd, string(c))
}

// Defaults of Config. The connection's own are those of fanout's HTTP/2
// client (internal/h2conn).
const (
	DefaultDialTimeout                   = 5 * time.Second
	DefaultReadIdleTimeout               = h2conn.DefaultReadIdleTimeout
	DefaultPingTimeout                   = h2conn.DefaultPingTimeout
	DefaultMaxReceiveBufferPerStream     = h2conn.DefaultMaxReceiveBufferPerStream
	DefaultMaxReceiveBufferPerConnection = h2conn.DefaultMaxReceiveBufferPerConnection
	DefaultIdleConnTimeout               = h2conn.DefaultIdleConnTimeout
)

// DefaultAnswerWindowBudget is the most AutoAnswerWindowBudget gives, and
// what it gives without a memory limit; MinAutoAnswerWindowBudget the
// least (one full stream window).
const (
	DefaultAnswerWindowBudget = 64 << 20
	MinAutoAnswerWindowBudget = 1 << 20
)

// AutoAnswerWindowBudget is the answer window budget for a Go memory
// limit of limit bytes (debug.SetMemoryLimit; math.MaxInt64 means none):
// a 128th of it, within [MinAutoAnswerWindowBudget,
// DefaultAnswerWindowBudget], and DefaultAnswerWindowBudget without a
// limit. Under the injected sidecar's 256Mi (a Go limit of 90% of it)
// that is 1.8 MiB; docs/security.md sums it with the other bounds.
func AutoAnswerWindowBudget(limit int64) int64 {
	if limit <= 0 || limit == math.MaxInt64 {
		return DefaultAnswerWindowBudget
	}
	return min(max(limit/128, MinAutoAnswerWindowBudget), DefaultAnswerWindowBudget)
}

// withDefaults returns c with zero (or negative) fields set to defaults,
// or an error naming the field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.ServerName == "" {
		return c, errors.New("transport: Config.ServerName is empty; set it to the kubeconfig server's host or pass --tls-server-name")
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if err := c.Client.Validate(); err != nil {
		return c, fmt.Errorf("transport: Config.Client: %w", err)
	}
	if c.Client == "" {
		c.Client = ClientOwn
	}
	h, err := c.conn().WithDefaults()
	if err != nil {
		return c, fmt.Errorf("transport: Config.%w", err)
	}
	c.ReadIdleTimeout, c.PingTimeout, c.IdleConnTimeout = h.ReadIdleTimeout, h.PingTimeout, h.IdleConnTimeout
	c.MaxReceiveBufferPerStream, c.MaxReceiveBufferPerConnection = h.MaxReceiveBufferPerStream, h.MaxReceiveBufferPerConnection
	if c.AnswerWindowBudget == 0 {
		c.AnswerWindowBudget = AutoAnswerWindowBudget(debug.SetMemoryLimit(-1))
	}
	return c, nil
}

// conn is the configuration of every connection of the pools; each set
// of connections adds its callbacks. The preface is bounded as the dial
// was.
func (c Config) conn() h2conn.Config {
	var windows h2conn.Budget
	if c.WindowBudget != nil {
		windows = c.WindowBudget
	}
	return h2conn.Config{
		WindowBudget:                  windows,
		MaxReceiveBufferPerStream:     c.MaxReceiveBufferPerStream,
		MaxReceiveBufferPerConnection: c.MaxReceiveBufferPerConnection,
		ReadIdleTimeout:               c.ReadIdleTimeout,
		PingTimeout:                   c.PingTimeout,
		IdleConnTimeout:               c.IdleConnTimeout,
		PrefaceTimeout:                c.DialTimeout,
	}
}
