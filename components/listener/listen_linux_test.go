package listener

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fanout-dev/fanout/internal/handoff"
	"github.com/fanout-dev/fanout/internal/testkit"
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
			if got := acceptedKeepAlive(t, ln); got != c.want {
				t.Errorf("listening on %s: SO_KEEPALIVE %v on an accepted connection, want %v", c.listen, got, c.want)
			}
		})
	}
}

// acceptedKeepAlive accepts the connection waiting on ln and tells whether
// SO_KEEPALIVE is on for fanout's side of it.
func acceptedKeepAlive(t *testing.T, ln net.Listener) bool {
	t.Helper()
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
	return on != 0
}

// TestInheritedListenerSkipsKeepAlive: on the socket taken from `fanout
// hold` accepted connections get no TCP keep-alive either, as on a
// loopback listener of fanout's own; the socket alone (net.FileListener)
// would give them Go's default, on.
func TestInheritedListenerSkipsKeepAlive(t *testing.T) {
	dir := t.TempDir()
	_, addr := holder(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
	defer cancel()
	fd, err := handoff.Fetch(ctx, filepath.Join(dir, handoff.HolderSocket))
	if err != nil {
		t.Fatal(err)
	}
	tl, err := handoff.Listener(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	for _, inherited := range []bool{true, false} {
		client, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		got := acceptedKeepAlive(t, acceptFrom(tl, inherited))
		client.Close()
		if want := !inherited; got != want {
			t.Errorf("acceptFrom(inherited=%v): SO_KEEPALIVE %v on an accepted connection, want %v", inherited, got, want)
		}
	}
}
