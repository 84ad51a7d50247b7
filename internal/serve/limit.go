package serve

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// LimitConnections caps the connections the server holds open at once;
// 0 (the default) means no cap. Call it before Start. A connection beyond
// the cap is closed as soon as it is accepted, so its client fails at once
// (a probe fails, a scrape errors) instead of waiting in the kernel's
// backlog, and the server's goroutines, buffers and file descriptors stay
// bounded whoever connects.
func (s *Server) LimitConnections(max int) { s.maxConns = max }

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
