package listener

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"time"
)

// Config configures the Server. The zero value of every field means its
// default.
type Config struct {
	// ListenAddress is where the loopback server listens, host:port.
	// Default 127.0.0.1:7080.
	ListenAddress string

	// AllowAnyHost turns off the Host check: by default the Server answers
	// 403 to a request whose Host is not localhost or a loopback address
	// (DNS rebinding; see withLoopbackHost). The sidecar sets it with
	// --allow-remote, where clients use names fanout cannot know.
	AllowAnyHost bool

	// ReadHeaderTimeout cuts clients that do not finish their request
	// headers in time (slowloris). Default 10s. There is deliberately no
	// read or write timeout: watches and logs last for hours.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections without requests.
	// Default 120s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds request headers; larger ones get 431.
	// Default 1 MiB, like kube-apiserver.
	MaxHeaderBytes int
	// HeaderBudget bounds the request header bytes held by all
	// connections and requests together (--header-budget; see
	// withHeaderBudget): a header that finds it spent gets 431. 0 is
	// AutoHeaderBudget of the process's Go memory limit when New runs;
	// negative means no budget.
	HeaderBudget int64

	// MaxConcurrentStreams is the HTTP/2 (h2c) stream limit per client
	// connection. Default 1000: one client-go connection carries all of a
	// controller's watches, and the 100 that HTTP/2 allows by default are
	// used up by a controller with many informers.
	MaxConcurrentStreams int
	// MaxReceiveBufferPerStream and MaxReceiveBufferPerConnection are the
	// HTTP/2 flow-control windows for request bodies, which net/http's
	// server buffers until the handler reads them. Defaults 64 KiB and
	// 256 KiB: kube-apiserver bodies are small and the handler reads them
	// at once, and the windows times the h2c connections the header budget
	// allows (14 under 256Mi) must fit the memory limit with the other
	// bounds (docs/security.md, "The sum of the memory bounds").
	MaxReceiveBufferPerStream     int
	MaxReceiveBufferPerConnection int

	// MaxConnections bounds open client connections, upgraded ones
	// included; more are closed at accept. Default 8192. With HTTP/1.1,
	// client-go opens one connection per watch.
	MaxConnections int
	// MaxInflight bounds short requests served at once, MaxLongRunning
	// long-running ones (watch, logs, exec, attach, port-forward, proxy);
	// over either budget fanout answers 429 with Retry-After. Defaults 1000
	// and 4096. The budgets are apart so that many watches never starve
	// short requests, and a burst of short requests never stops watches.
	MaxInflight    int
	MaxLongRunning int
	// RequestBodyTimeout bounds how long a request may take to send its
	// body, long-running requests (watch, logs, proxy) included. Default
	// 60s, kube-apiserver's own request timeout. Upgrades are exempt: exec
	// and port-forward stream their input for hours.
	RequestBodyTimeout time.Duration

	// H1Server is the server of plaintext HTTP/1.1 (--h1-server):
	// H1ServerOwn, internal/h1server, which hands h2c to net/http; or
	// H1ServerStd, net/http's, which then takes h2c too. std is there to
	// measure the two against each other; what it lacks is in
	// H1ServerStd's comment. "" means own. Ignored with TLS, which
	// net/http serves either way.
	H1Server string

	// TLS, when set, makes the listener serve TLS with it (HTTP/1.1 and
	// HTTP/2 by ALPN) instead of plaintext HTTP/1.1 and h2c
	// (--listen-tls). Set ClientAuth in it to require client certificates.
	TLS *tls.Config

	// ListenFrom is a directory shared with `fanout hold` (--listen-from):
	// Start takes the listening socket the holder holds there
	// (internal/handoff) instead of opening one, and hands its own copy
	// out in turn, for a holder that restarts. When no holder answers
	// within ListenFromWait, Start listens itself. "" turns it off.
	ListenFrom string
	// ListenFromWait bounds the wait for the holder. Default 2s: at the
	// pod's start the holder, started just before, may not have bound yet;
	// at a restart of fanout it answers at once.
	ListenFromWait time.Duration

	// ShutdownGrace bounds how long Stop waits for short requests
	// (--shutdown-grace); zero means until Stop's context is done.
	// Long-running requests are ended at once either way.
	ShutdownGrace time.Duration

	// Log takes the lines net/http writes itself (a failed TLS handshake,
	// an accept error); nil discards them.
	Log *slog.Logger
}

// Defaults of Config.
const (
	DefaultListenAddress                 = "127.0.0.1:7080"
	DefaultReadHeaderTimeout             = 10 * time.Second
	DefaultIdleTimeout                   = 120 * time.Second
	DefaultMaxHeaderBytes                = 1 << 20
	DefaultMaxConcurrentStreams          = 1000
	DefaultMaxReceiveBufferPerStream     = 64 << 10
	DefaultMaxReceiveBufferPerConnection = 256 << 10
	DefaultMaxConnections                = 8192
	DefaultMaxInflight                   = 1000
	DefaultMaxLongRunning                = 4096
	DefaultRequestBodyTimeout            = 60 * time.Second
	DefaultListenFromWait                = 2 * time.Second
	// DefaultShutdownGrace is --shutdown-grace's default; a zero
	// ShutdownGrace waits until Stop's context is done.
	DefaultShutdownGrace = 30 * time.Second
)

// Values of Config.H1Server.
const (
	// H1ServerOwn is internal/h1server: the header budget from a
	// header's first byte, the hang-up watcher, detached streams.
	H1ServerOwn = "own"
	// H1ServerStd is net/http's server, for comparison. It lacks what
	// h1server adds: an HTTP/1.1 header takes header budget only once
	// parsed and while its handler runs (as with TLS), so a header being
	// read is bounded per connection only (MaxHeaderBytes); an h2c
	// connection holds no header budget for its life; a watch's answer
	// is not detached, so the connection's goroutine (running the
	// handler), net/http's background read and the connection's buffers
	// wait with it.
	H1ServerStd = "std"
)

// DefaultHeaderBudget is the most AutoHeaderBudget gives, and what it
// gives without a memory limit; MinAutoHeaderBudget the least.
const (
	DefaultHeaderBudget = 64 << 20
	MinAutoHeaderBudget = 4 << 20
)

// AutoHeaderBudget is the header budget for a Go memory limit of limit
// bytes (debug.SetMemoryLimit; math.MaxInt64 means none) and headers of
// up to maxHeaderBytes: a sixteenth of the limit, within
// [MinAutoHeaderBudget, DefaultHeaderBudget] and at least one header of
// the largest size, and DefaultHeaderBudget without a limit. Under the
// injected sidecar's 256Mi (a Go limit of 90% of it) that is 14.4 MiB;
// docs/security.md sums it with the other bounds.
func AutoHeaderBudget(limit int64, maxHeaderBytes int) int64 {
	b := int64(DefaultHeaderBudget)
	if limit > 0 && limit != math.MaxInt64 {
		b = min(max(limit/16, MinAutoHeaderBudget), DefaultHeaderBudget)
	}
	return max(b, int64(maxHeaderBytes))
}

// maxHeaderBytes is MaxHeaderBytes or its default.
func (c Config) maxHeaderBytes() int {
	if c.MaxHeaderBytes > 0 {
		return c.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

// ownH1 tells whether internal/h1server takes plaintext HTTP/1.1.
func (c Config) ownH1() bool { return c.TLS == nil && c.H1Server != H1ServerStd }

// Defaults is the Config with every default spelled out, as the sidecar's
// flags start from it (so --help shows them).
func Defaults() Config {
	return Config{
		ListenAddress:        DefaultListenAddress,
		ShutdownGrace:        DefaultShutdownGrace,
		MaxConnections:       DefaultMaxConnections,
		MaxInflight:          DefaultMaxInflight,
		MaxLongRunning:       DefaultMaxLongRunning,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams,
		MaxHeaderBytes:       DefaultMaxHeaderBytes,
		ReadHeaderTimeout:    DefaultReadHeaderTimeout,
		RequestBodyTimeout:   DefaultRequestBodyTimeout,
		IdleTimeout:          DefaultIdleTimeout,
		H1Server:             H1ServerOwn,
	}
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if c.ListenAddress != "" {
		if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
			return fmt.Errorf("proxy listen address %q is not host:port: %v", c.ListenAddress, err)
		}
	}
	switch c.H1Server {
	case "", H1ServerOwn, H1ServerStd:
	default:
		return fmt.Errorf("--h1-server must be %s or %s, got %q", H1ServerOwn, H1ServerStd, c.H1Server)
	}
	if c.ShutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace must not be negative, got %v", c.ShutdownGrace)
	}
	if c.ReadHeaderTimeout < 0 || c.IdleTimeout < 0 {
		return fmt.Errorf("proxy timeouts must not be negative, got read-header %v and idle %v", c.ReadHeaderTimeout, c.IdleTimeout)
	}
	if c.MaxHeaderBytes < 0 || c.MaxConcurrentStreams < 0 {
		return fmt.Errorf("proxy max header bytes and max concurrent streams must not be negative, got %d and %d", c.MaxHeaderBytes, c.MaxConcurrentStreams)
	}
	if c.HeaderBudget > 0 && c.HeaderBudget < int64(c.maxHeaderBytes()) {
		return fmt.Errorf("--header-budget must be at least --max-header-bytes (%d), or no header of the largest size could be read; got %d", c.maxHeaderBytes(), c.HeaderBudget)
	}
	if c.MaxReceiveBufferPerConnection != 0 && c.MaxReceiveBufferPerConnection < 65535 {
		return fmt.Errorf("proxy HTTP/2 connection receive buffer must be at least 65535 bytes (the initial window), got %d", c.MaxReceiveBufferPerConnection)
	}
	if c.MaxConnections < 0 || c.MaxInflight < 0 || c.MaxLongRunning < 0 || c.RequestBodyTimeout < 0 {
		return fmt.Errorf("proxy limits must not be negative, got max connections %d, max in-flight %d, max long-running %d, request body timeout %v",
			c.MaxConnections, c.MaxInflight, c.MaxLongRunning, c.RequestBodyTimeout)
	}
	if c.MaxReceiveBufferPerStream < 0 {
		return fmt.Errorf("proxy HTTP/2 stream receive buffer must not be negative, got %d", c.MaxReceiveBufferPerStream)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ListenAddress == "" {
		c.ListenAddress = DefaultListenAddress
	}
	if c.H1Server == "" {
		c.H1Server = H1ServerOwn
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	switch {
	case c.HeaderBudget == 0:
		c.HeaderBudget = AutoHeaderBudget(debug.SetMemoryLimit(-1), c.MaxHeaderBytes)
	case c.HeaderBudget < 0:
		c.HeaderBudget = -1
	}
	if c.MaxConcurrentStreams <= 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if c.MaxReceiveBufferPerStream <= 0 {
		c.MaxReceiveBufferPerStream = DefaultMaxReceiveBufferPerStream
	}
	if c.MaxReceiveBufferPerConnection <= 0 {
		c.MaxReceiveBufferPerConnection = DefaultMaxReceiveBufferPerConnection
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxLongRunning <= 0 {
		c.MaxLongRunning = DefaultMaxLongRunning
	}
	if c.RequestBodyTimeout <= 0 {
		c.RequestBodyTimeout = DefaultRequestBodyTimeout
	}
	if c.ListenFromWait <= 0 {
		c.ListenFromWait = DefaultListenFromWait
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}
