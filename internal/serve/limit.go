package serve

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LimitConnections caps the connections the server holds open at once;
// 0 (the default) means no cap. Call it before Start. At the cap, a new
// connection takes the place of the one that has been idle longest, which
// is closed; evicted counts those, and may be nil. Idle is net/http's
// sense: between requests, or before a request's header has been read
// whole, so a connection that trickles its header is evicted too. Only
// when every connection is in the middle of a request (its header read,
// its answer not yet written) is the new one closed at accept, so its
// client fails at once instead of waiting in the kernel's backlog. The
// server's goroutines, buffers and file descriptors stay bounded whoever
// connects, and a peer that merely holds connections open cannot lock out
// a newcomer such as a kubelet probe. HTTP/1.x only: net/http reports no
// states for HTTP/2 over TLS, whose connections would all count as idle.
func (s *Server) LimitConnections(max int, evicted prometheus.Counter) {
	s.maxConns, s.evicted = max, evicted
}

// ListenerMetrics count what a LimitListener does; a nil field counts
// nothing.
type ListenerMetrics struct {
	// Rejected counts connections closed at accept, beyond the cap.
	Rejected prometheus.Counter
	// Open is the number of connections open, hijacked ones included.
	Open prometheus.Gauge
}

// LimitListener returns ln with at most max connections open at once.
// Unlike netutil.LimitListener, which leaves connections beyond the cap
// in the kernel's backlog, it closes them at once: a client then fails
// fast (and client-go retries) instead of hanging on a connection nobody
// will read. A connection keeps its slot until it is closed, also once
// hijacked (an upgrade).
func LimitListener(ln net.Listener, max int, m ListenerMetrics) net.Listener {
	return &limitListener{Listener: ln, max: int64(max), metrics: m}
}

// limitListener closes connections beyond max at accept.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	metrics ListenerMetrics
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			if l.metrics.Rejected != nil {
				l.metrics.Rejected.Inc()
			}
			_ = c.Close()
			continue
		}
		if l.metrics.Open != nil {
			l.metrics.Open.Inc()
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its slot back on the first Close; net/http and the
// proxy's upgrade code may both close it.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

// NetConn returns the accepted connection, as tls.Conn's does, for code
// that needs its descriptor (the proxy's hang-up watcher).
func (c *limitConn) NetConn() net.Conn { return c.Conn }

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		if c.l.metrics.Open != nil {
			c.l.metrics.Open.Dec()
		}
	})
	return err
}

// evictListener holds at most max connections and, at the cap, closes
// the one idle longest to make room for a new one. The http.Server's
// ConnState hook (track) tells it which connections are idle.
type evictListener struct {
	net.Listener
	max     int
	evicted prometheus.Counter // may be nil

	mu    sync.Mutex
	conns map[*evictConn]struct{} // the open ones
}

// evictConn is a connection of an evictListener. idle and idleSince are
// guarded by the listener's mu.
type evictConn struct {
	net.Conn
	l         *evictListener
	idle      bool
	idleSince time.Time
	once      sync.Once
}

func newEvictListener(ln net.Listener, max int, evicted prometheus.Counter) *evictListener {
	return &evictListener{Listener: ln, max: max, evicted: evicted, conns: make(map[*evictConn]struct{}, max)}
}

func (l *evictListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Until its first request's header is read a new connection
		// counts as idle since now, so one that never sends is evicted
		// in turn.
		ec := &evictConn{Conn: c, l: l, idle: true, idleSince: time.Now()}
		l.mu.Lock()
		var victim *evictConn
		if len(l.conns) >= l.max {
			victim = l.idlestLocked()
			if victim == nil {
				l.mu.Unlock()
				_ = c.Close()
				continue
			}
			delete(l.conns, victim)
		}
		l.conns[ec] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			// As with an idle timeout, a request that arrives on the
			// victim just now can meet the close; HTTP clients expect
			// that of an idle keep-alive connection and retry on a new
			// one.
			_ = victim.Close()
			if l.evicted != nil {
				l.evicted.Inc()
			}
		}
		return ec, nil
	}
}

// idlestLocked returns the connection idle longest, or nil when every
// connection is in the middle of a request (or hijacked).
func (l *evictListener) idlestLocked() *evictConn {
	var idlest *evictConn
	for c := range l.conns {
		if c.idle && (idlest == nil || c.idleSince.Before(idlest.idleSince)) {
			idlest = c
		}
	}
	return idlest
}

// track is the http.Server's ConnState hook: a connection is idle from
// StateIdle until StateActive (which net/http reports once a request's
// header has been read), and a hijacked one is never idle again.
func (l *evictListener) track(c net.Conn, state http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	ec, ok := c.(*evictConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateIdle:
		ec.idle, ec.idleSince = true, time.Now()
	case http.StateActive, http.StateHijacked:
		ec.idle = false
	}
}

// NetConn returns the accepted connection, as tls.Conn's does.
func (c *evictConn) NetConn() net.Conn { return c.Conn }

// Close gives the slot back on the first call; net/http and Accept (an
// eviction) may both close the connection.
func (c *evictConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}
