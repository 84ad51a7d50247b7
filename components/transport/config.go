package transport

import (
	"errors"
	"math"
	"time"
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
	// window of a whole connection. Defaults 1 MiB and 16 MiB.
	//
	// x/net's defaults (4 MiB per stream, 1 GiB per connection) suit a
	// client that reads every response promptly. fanout relays responses
	// to controllers that may read a watch slowly: the stream window is
	// what lets such a reader stall only its own stream (the apiserver
	// stops sending on it) rather than filling fanout's memory, and the
	// connection window caps what up to 100 streams sharing a connection
	// can buffer in total. 1 MiB still holds several large objects, so
	// list and watch throughput is unaffected over a LAN.
	MaxReceiveBufferPerStream     int
	MaxReceiveBufferPerConnection int

	// IdleConnTimeout closes a connection that has carried no stream for
	// this long. Default 90s.
	IdleConnTimeout time.Duration

	// Now is the clock, replaced in tests. Default time.Now.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultDialTimeout                   = 5 * time.Second
	DefaultReadIdleTimeout               = 5 * time.Second
	DefaultPingTimeout                   = 3 * time.Second
	DefaultMaxReceiveBufferPerStream     = 1 << 20
	DefaultMaxReceiveBufferPerConnection = 16 << 20
	DefaultIdleConnTimeout               = 90 * time.Second
)

// minReceiveBuffer is the initial HTTP/2 window (RFC 9113 6.9.2); x/net
// ignores a connection window below it, so reject it rather than let the
// setting silently fall back to x/net's 1 GiB.
const minReceiveBuffer = 65535

// withDefaults returns c with zero (or negative) fields set to defaults,
// or an error naming the field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.ServerName == "" {
		return c, errors.New("transport: Config.ServerName is empty; set it to the kubeconfig server's host or pass --tls-server-name")
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setDur(&c.DialTimeout, DefaultDialTimeout)
	setDur(&c.ReadIdleTimeout, DefaultReadIdleTimeout)
	setDur(&c.PingTimeout, DefaultPingTimeout)
	setDur(&c.IdleConnTimeout, DefaultIdleConnTimeout)
	if c.MaxReceiveBufferPerStream <= 0 {
		c.MaxReceiveBufferPerStream = DefaultMaxReceiveBufferPerStream
	}
	if c.MaxReceiveBufferPerConnection <= 0 {
		c.MaxReceiveBufferPerConnection = DefaultMaxReceiveBufferPerConnection
	}
	if c.MaxReceiveBufferPerConnection < minReceiveBuffer {
		return c, errors.New("transport: Config.MaxReceiveBufferPerConnection must be at least 65535 bytes (the HTTP/2 initial window)")
	}
	if c.MaxReceiveBufferPerConnection > math.MaxInt32 {
		return c, errors.New("transport: Config.MaxReceiveBufferPerConnection exceeds the HTTP/2 maximum window of 2^31-1 bytes")
	}
	if c.MaxReceiveBufferPerStream > c.MaxReceiveBufferPerConnection {
		return c, errors.New("transport: Config.MaxReceiveBufferPerStream exceeds MaxReceiveBufferPerConnection; one stream could never use its whole window")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
