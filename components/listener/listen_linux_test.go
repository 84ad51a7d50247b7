package listener

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// TestLoopbackListenerSkipsKeepAlive accepts a real connection on the
// listener Start would open and reads SO_KEEPALIVE on fanout's side: off on
// loopback, Go's default (on) elsewhere.
func TestLoopbackListenerSkipsKeepAlive(t *testing.T) {
	for _, c := range []struct {
		listen, dial string
		want         bool
	}{
		{"127.0.0.1:0", "", false},
		{"[::1]:0", "", false},
		{"0.0.0.0:0", "127.0.0.1", true}, // --allow-remote: a peer across a network
	} {
		t.Run(c.listen, func(t *testing.T) {
			lc := listenConfig(c.listen)
			ln, err := lc.Listen(context.Background(), "tcp", c.listen)
			if err != nil {
				t.Skipf("listen %s: %v", c.listen, err)
			}
			defer ln.Close()
			addr := ln.Addr().String()
			if c.dial != "" {
				_, port, _ := net.SplitHostPort(addr)
				addr = net.JoinHostPort(c.dial, port)
			}
			client, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			raw, err := conn.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var on int
			var serr error
			if err := raw.Control(func(fd uintptr) {
				on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			}); err != nil || serr != nil {
				t.Fatal(err, serr)
			}
			if got := on != 0; got != c.want {
				t.Errorf("listening on %s: SO_KEEPALIVE %v on an accepted connection, want %v", c.listen, got, c.want)
			}
		})
	}
}
