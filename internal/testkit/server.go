package testkit

import (
	"context"
	"net"
	"testing"
	"time"
)

// Server is what fanout's servers (listener.Server, admin.Server) offer a
// test: a start that binds its port and a stop that drains.
type Server interface {
	Start(context.Context) error
	Stop(context.Context) error
}

// Start starts s and stops it when the test ends, giving the stop
// WaitLimit; a start or a stop that fails fails the test. Cleanups a test
// registers before Start run after the stop: there, what the server did
// is finished.
func Start(t testing.TB, s Server) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), WaitLimit)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// Dial opens a TCP connection to addr for a test that writes its own
// bytes. Reads and writes fail after WaitLimit rather than hang, and the
// connection closes when the test ends.
func Dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(WaitLimit))
	return c
}
