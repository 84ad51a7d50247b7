package h1server

import "net"

// hangupTarget is told, once, that its client hung up.
type hangupTarget interface{ hangup() }

// rawConn is the TCP connection under a wrapped one (a listener's limit,
// TLS), reached through NetConn.
func rawConn(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}
