package listener

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/fanout-dev/fanout/internal/handoff"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// holder is what `fanout hold` does: a bound socket, handed out in dir.
func holder(t *testing.T, dir string) (handoff.FD, string) {
	t.Helper()
	fd, err := handoff.Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(int(fd)) })
	addr, err := handoff.Addr(fd)
	if err != nil {
		t.Fatal(err)
	}
	s, err := handoff.Serve(filepath.Join(dir, handoff.HolderSocket), fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return fd, addr.String()
}

// TestListenFromHolder: with ListenFrom the Server serves on the holder's
// socket, with the listener's hardening as on its own (the Host check
// and the refusal of proxy requests answer before the handler), says so
// in fanout_listener_inherited, hands the socket on for a restarted
// holder, and leaves the holder's copy open when it stops.
func TestListenFromHolder(t *testing.T) {
	dir := t.TempDir()
	_, addr := holder(t, dir)
	h := &recordingHandler{}
	m := newMetrics()
	s := New(Config{ListenAddress: addr, ListenFrom: dir}, h, m)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = s.Stop(context.Background())
		}
	}()
	if !s.Inherited() || s.Addr().String() != addr {
		t.Fatalf("Inherited %v on %s, want the holder's socket on %s", s.Inherited(), s.Addr(), addr)
	}
	if v := testutil.ToFloat64(m.inherited); v != 1 {
		t.Errorf("fanout_listener_inherited = %v, want 1", v)
	}
	c := testkit.NewClient(t, false)
	resp, err := c.Get("http://" + addr + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET on the inherited socket: %d, want the handler's 204", resp.StatusCode)
	}
	if resp := testkit.RawRequest(t, addr, "GET /api/v1/pods HTTP/1.1\r\nHost: attacker.example\r\n\r\n"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a request for another Host on the inherited socket: %d, want 403", resp.StatusCode)
	}
	if resp := testkit.RawRequest(t, addr, "GET http://elsewhere/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an absolute-form request on the inherited socket: %d, want 400", resp.StatusCode)
	}

	// A restarted holder gets the same socket from the Server.
	ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
	defer cancel()
	fd, err := handoff.Fetch(ctx, filepath.Join(dir, handoff.FanoutSocket))
	if err != nil {
		t.Fatalf("fetching from the Server's own hand-out: %v", err)
	}
	if got, _ := handoff.Addr(fd); got.String() != addr {
		t.Errorf("the Server handed out a socket on %s, want %s", got, addr)
	}
	_ = unix.Close(int(fd))

	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("after Stop: %v, want the holder's socket still queueing connections", err)
	}
	conn.Close()
}

// TestListenFromWithoutHolder: nobody answers in ListenFrom, so the
// Server listens itself within ListenFromWait, and says so.
func TestListenFromWithoutHolder(t *testing.T) {
	m := newMetrics()
	s := New(Config{ListenAddress: "127.0.0.1:0", ListenFrom: t.TempDir(), ListenFromWait: 50 * time.Millisecond}, &recordingHandler{}, m)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }()
	if s.Inherited() {
		t.Error("Inherited with no holder")
	}
	if v := testutil.ToFloat64(m.inherited); v != 0 {
		t.Errorf("fanout_listener_inherited = %v, want 0", v)
	}
	resp, err := testkit.NewClient(t, false).Get("http://" + s.Addr().String() + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestListenFromOtherAddress: a holder holding another address than
// ListenAddress is a configuration error, said at start.
func TestListenFromOtherAddress(t *testing.T) {
	dir := t.TempDir()
	_, addr := holder(t, dir)
	_, port, _ := net.SplitHostPort(addr)
	other := "127.0.0.2:" + port
	s := New(Config{ListenAddress: other, ListenFrom: dir}, &recordingHandler{}, nil)
	err := s.Start(context.Background())
	if err == nil {
		_ = s.Stop(context.Background())
		t.Fatal("Start served on a socket bound elsewhere, want an error")
	}
	if !strings.Contains(err.Error(), "--listen-address "+other) {
		t.Errorf("Start: %v, want it to name --listen-address %s", err, other)
	}
}

// TestListenerMetricsLint: the listener's metrics pass promlint.
func TestListenerMetricsLint(t *testing.T) {
	m := newMetrics()
	for _, c := range m.Collectors() {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// TestAcceptAfter: a Server told to wait for its endpoints listens at
// Start but accepts only once they are there (a request sent meanwhile
// waits in the socket's backlog, then is answered), or once the wait
// bound has passed; Stop ends the wait.
func TestAcceptAfter(t *testing.T) {
	start := func(t *testing.T, ready <-chan struct{}, wait time.Duration) (*Server, handoff.FD, string) {
		dir := t.TempDir()
		fd, addr := holder(t, dir)
		s := New(Config{ListenAddress: addr, ListenFrom: dir}, &recordingHandler{}, nil)
		s.AcceptAfter(ready, wait)
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s, fd, addr
	}
	// send writes a request and returns a function that reads its answer.
	send := func(t *testing.T, addr string) func() int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte("GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		return func() int {
			_ = c.SetReadDeadline(time.Now().Add(testkit.WaitLimit))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
	}
	t.Run("ready", func(t *testing.T) {
		ready := make(chan struct{})
		s, fd, addr := start(t, ready, time.Hour)
		defer s.Stop(context.Background())
		answer := send(t, addr)
		testkit.WaitFor(t, "the connection to wait in the backlog", func() bool {
			queued, _, err := handoff.Backlog(fd)
			return err == nil && queued == 1
		})
		close(ready)
		if code := answer(); code != http.StatusNoContent {
			t.Errorf("answered %d once ready, want the handler's 204", code)
		}
	})
	t.Run("wait bound", func(t *testing.T) {
		const wait = 300 * time.Millisecond
		begin := time.Now()
		s, _, addr := start(t, make(chan struct{}), wait) // never ready
		defer s.Stop(context.Background())
		if code := send(t, addr)(); code != http.StatusNoContent {
			t.Errorf("answered %d, want 204", code)
		}
		if took := time.Since(begin); took < wait {
			t.Errorf("answered %s after Start, before the %s bound: the Server did not hold accepting back", took, wait)
		}
	})
	t.Run("stop while waiting", func(t *testing.T) {
		s, _, addr := start(t, make(chan struct{}), time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Fatalf("Stop while holding accepting back: %v", err)
		}
		// The holder's copy of the socket still queues connections.
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("after Stop: %v, want the holder's socket still open", err)
		}
		c.Close()
	})
}
