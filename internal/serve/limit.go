package serve

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitConnections caps the connections the server holds open at once;
// 0 (the default) means no cap. Call it before Start. A connection beyond
// the cap is closed as soon as it is accepted, so its client fails at once
// (a probe fails, a scrape errors) instead of waiting in the kernel's
// backlog, and the server's goroutines, buffers and file descriptors stay
// bounded whoever connects.
func (s *Server) LimitConnections(max int) { s.maxConns = max }

// limitListener closes connections beyond max at accept.
type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its slot back on the first Close; net/http may close a
// connection more than once.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
