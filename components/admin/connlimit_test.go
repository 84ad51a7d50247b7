package admin

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// startCapped starts an admin server with the default cap serving h on
// loopback and returns its address; the server stops when the test ends.
func startCapped(t *testing.T, h http.Handler) (*Server, string) {
	t.Helper()
	s := NewServer(Config{ListenAddress: "127.0.0.1:0"}, h, nil)
	testkit.Start(t, s)
	return s, s.Addr().String()
}

// get sends one GET for path on c and reads the answer, which must be 200.
func get(c net.Conn, path string) error {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
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

// TestAdminProbeEvictsIdleConnection: a peer on the pod network that holds
// every slot with idle keep-alive connections cannot starve the kubelet's
// probes. The next connection is served, and the connection idle longest
// is closed to make room.
func TestAdminProbeEvictsIdleConnection(t *testing.T) {
	st := &fakeState{}
	st.ready.Store(true)
	s, addr := startCapped(t, NewHandler(st, prometheus.NewRegistry(), nil))

	held := make([]net.Conn, 0, DefaultMaxConnections)
	for range DefaultMaxConnections {
		c := testkit.Dial(t, addr)
		if err := get(c, "/healthz"); err != nil {
			t.Fatalf("connection %d of %d within the cap: %v", len(held)+1, DefaultMaxConnections, err)
		}
		held = append(held, c)
	}

	probe := testkit.Dial(t, addr)
	if err := get(probe, "/healthz"); err != nil {
		t.Fatalf("probe on a new connection while %d idle keep-alive connections are held: %v", DefaultMaxConnections, err)
	}
	// The oldest idle connection was the one closed: the server's close
	// is the event waited for.
	if _, err := held[0].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the connection idle longest: read %v, want EOF (closed by the server)", err)
	}
	if got := testutil.ToFloat64(s.evicted); got != 1 {
		t.Errorf("fanout_admin_connections_evicted_total = %v, want 1", got)
	}
	// The others are still served.
	if err := get(held[len(held)-1], "/healthz"); err != nil {
		t.Errorf("the most recently used held connection: %v", err)
	}
}

// TestAdminEvictsTricklingHeader: a connection whose request header has
// not arrived whole holds no slot against a newcomer either.
func TestAdminEvictsTricklingHeader(t *testing.T) {
	st := &fakeState{}
	st.ready.Store(true)
	s, addr := startCapped(t, NewHandler(st, prometheus.NewRegistry(), nil))

	trickling := testkit.Dial(t, addr)
	if _, err := io.WriteString(trickling, "GET /healthz HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < DefaultMaxConnections; i++ {
		if err := get(testkit.Dial(t, addr), "/healthz"); err != nil {
			t.Fatalf("connection %d of %d within the cap: %v", i+1, DefaultMaxConnections, err)
		}
	}
	if err := get(testkit.Dial(t, addr), "/healthz"); err != nil {
		t.Fatalf("probe on a new connection while one connection trickles its header and %d are idle: %v", DefaultMaxConnections-1, err)
	}
	if _, err := trickling.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the trickling connection: read %v, want EOF (closed by the server)", err)
	}
	if got := testutil.ToFloat64(s.evicted); got != 1 {
		t.Errorf("fanout_admin_connections_evicted_total = %v, want 1", got)
	}
}

// TestAdminConnectionCap: the admin server, open to the pod network, holds
// at most DefaultMaxConnections connections (NewServer's default). A
// connection in the middle of a request is never evicted: with every slot
// busy, one more is closed at accept, before anything is read from it;
// once a held connection ends, a new one is served again.
func TestAdminConnectionCap(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, DefaultMaxConnections)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /block", func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-release
	})
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	s, addr := startCapped(t, mux)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	// Fill the cap with connections whose request is being served.
	held := make([]net.Conn, 0, DefaultMaxConnections)
	for range DefaultMaxConnections {
		c := testkit.Dial(t, addr)
		if _, err := io.WriteString(c, "GET /block HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for i := range DefaultMaxConnections {
		select {
		case <-started:
		case <-time.After(testkit.WaitLimit):
			t.Fatalf("%d of %d requests within the cap reached the handler", i, DefaultMaxConnections)
		}
	}

	// One more: closed at accept. The event waited for is its end.
	extra := testkit.Dial(t, addr)
	var ne net.Error
	if err := get(extra, "/healthz"); err == nil {
		t.Fatalf("connection %d was served while %d requests were in flight; the admin server holds at most %d", DefaultMaxConnections+1, DefaultMaxConnections, DefaultMaxConnections)
	} else if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection over the cap: no answer and not closed within %v", testkit.WaitLimit)
	}
	if got := testutil.ToFloat64(s.evicted); got != 0 {
		t.Errorf("fanout_admin_connections_evicted_total = %v with every connection busy, want 0", got)
	}

	// Once the requests end, their connections are idle, and the next
	// new connection is served at once, in place of the one idle longest.
	close(release)
	released = true
	for i, c := range held {
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatalf("held request %d: %v", i, err)
		} else {
			resp.Body.Close()
		}
	}
	if err := get(testkit.Dial(t, addr), "/healthz"); err != nil {
		t.Fatalf("a new connection once the held requests ended: %v", err)
	}
	if got := testutil.ToFloat64(s.evicted); got != 1 {
		t.Errorf("fanout_admin_connections_evicted_total = %v, want 1", got)
	}
}
