package admin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAdminConnectionCap: the admin server, open to the pod network, holds
// at most DefaultMaxConnections connections (NewServer's default). One
// more is closed at accept, before anything is read from it; once a held
// connection ends, a new one is served again.
func TestAdminConnectionCap(t *testing.T) {
	const waitLimit = 30 * time.Second // a bound for hangs, not a speed target
	st := &fakeState{}
	st.ready.Store(true)
	s := NewServer(Config{ListenAddress: "127.0.0.1:0"}, NewHandler(st, prometheus.NewRegistry(), nil), nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	addr := s.Addr().String()
	// healthz sends one request on c and reads the answer: c is served.
	healthz := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Fill the cap with keep-alive connections, each served once and then
	// left open (the server keeps them for its idle timeout).
	held := make([]net.Conn, 0, DefaultMaxConnections)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range DefaultMaxConnections {
		c := dial()
		held = append(held, c)
		if err := healthz(c); err != nil {
			t.Fatalf("connection %d of %d within the cap: %v", len(held), DefaultMaxConnections, err)
		}
	}

	// One more: closed at accept. The event waited for is its end.
	extra := dial()
	defer extra.Close()
	var ne net.Error
	if err := healthz(extra); err == nil {
		t.Fatalf("connection %d was served; the admin server holds at most %d", DefaultMaxConnections+1, DefaultMaxConnections)
	} else if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection over the cap: no answer and not closed within %v", waitLimit)
	}

	// A held connection ends: its slot is free again once the server has
	// seen the close, which the retry loop waits for.
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(waitLimit)
	for {
		c := dial()
		err := healthz(c)
		c.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one of the %d held ones closed: %v", DefaultMaxConnections, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
