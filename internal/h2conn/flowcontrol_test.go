package h2conn

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// floodServer serves /flood, which writes as fast as the client's
// flow-control windows allow until the client goes away, and /watch, which
// writes a small event every 5 ms, like a busy watch. flooded counts the
// bytes the /flood handlers got past Write.
type floodServer struct {
	*h2Server
	flooded atomic.Int64
}

func newFloodServer(t *testing.T, p *testkit.PKI, maxStreams int) *floodServer {
	t.Helper()
	s := &floodServer{}
	chunk := make([]byte, 16<<10)
	event := []byte(`{"type":"MODIFIED","object":{"kind":"ConfigMap"}}` + "\n")
	s.h2Server = newH2Server(t, p, tls.RequireAndVerifyClientCert, maxStreams, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		switch r.URL.Path {
		case "/flood":
			for r.Context().Err() == nil {
				n, err := w.Write(chunk)
				s.flooded.Add(int64(n))
				if err != nil {
					return
				}
			}
		case "/watch":
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					if _, err := w.Write(event); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}
		}
	}))
	return s
}

// watchEvents starts a healthy watch, GET /watch on rt read as fast as
// it comes, and returns the count of bytes read once the first came. The
// body is closed when the test ends.
func watchEvents(t *testing.T, ctx context.Context, rt http.RoundTripper, addr string) *atomic.Int64 {
	t.Helper()
	res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, addr, "/watch"))
	if err != nil {
		t.Fatal(err)
	}
	got := new(atomic.Int64)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 4<<10)
		for {
			n, err := res.Body.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { res.Body.Close(); <-readDone })
	testkit.WaitFor(t, "the watch's first events", func() bool { return got.Load() > 0 })
	return got
}

// unreadFloods sends n GET /flood on rt whose bodies nobody reads until
// the test ends, which closes them.
func unreadFloods(t *testing.T, ctx context.Context, rt http.RoundTripper, addr string, n int) []*http.Response {
	t.Helper()
	ress := make([]*http.Response, 0, n)
	t.Cleanup(func() {
		for _, res := range ress {
			res.Body.Close()
		}
	})
	for i := range n {
		res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, addr, "/flood"))
		if err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
		ress = append(ress, res)
	}
	return ress
}

// TestUnreadStreamsDoNotStarveTheConnection: response bodies that nobody
// reads (a watch whose consumer is slow, a LIST read later) must stall
// only their own streams. In x/net's HTTP/2 client the connection-level
// window comes back only when a body is read, so if the connection window
// were smaller than what the unread streams may hold (streams × stream
// window), those streams would take all of it and every other stream on
// the connection, a healthy watch included, would stop getting DATA: the
// apiserver then force-closes that watcher as unresponsive, and even the
// end of the stream waits behind the exhausted window.
//
// The unread streams' buffers stay bounded by their stream window.
func TestUnreadStreamsDoNotStarveTheConnection(t *testing.T) {
	const floods = 24 // 24 × 1 MiB unread: more than the old 16 MiB connection window
	for _, tc := range []struct {
		name        string
		cfg         Config
		wantStarved bool
	}{
		{"defaults", Config{}, false},
		// The reproduction: the connection window of fanout's earlier
		// default, 16 MiB for up to 100 streams of 1 MiB.
		{"16 MiB connection window", Config{MaxReceiveBufferPerConnection: 16 << 20}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testkit.NewPKI(t, serverName)
			srv := newFloodServer(t, p, 100)
			rt := newClients(t, p, tc.cfg).For(srv.addr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			got := watchEvents(t, ctx, rt, srv.addr)
			unreadFloods(t, ctx, rt, srv.addr, floods)
			// Wait until the server can send no more on them: their
			// windows (or the connection's) are used up.
			var last int64 = -1
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
				n := srv.flooded.Load()
				if n == last && n > 0 {
					break
				}
				last = n
				if time.Now().After(deadline) {
					t.Fatalf("the unread streams were still receiving after 30 s (%d bytes): no flow control?", n)
				}
			}
			if n := srv.opened.Load(); n != 1 {
				t.Fatalf("the streams used %d connections, want 1: the test needs them to share one", n)
			}
			// Memory: each unread stream holds at most its window (plus
			// what the server's write buffers hold).
			perStream := int64(DefaultMaxReceiveBufferPerStream)
			if tc.cfg.MaxReceiveBufferPerStream > 0 {
				perStream = int64(tc.cfg.MaxReceiveBufferPerStream)
			}
			if max := floods * (perStream + 64<<10); last > max {
				t.Errorf("%d unread streams took %d bytes, want at most %d: the stream window must bound each", floods, last, max)
			}

			// Does the watch still get events?
			before := got.Load()
			flowing := false
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if got.Load() > before+1024 {
					flowing = true
					break
				}
			}
			t.Logf("%d unread streams hold %d bytes; the watch got %d bytes in the 3 s after", floods, last, got.Load()-before)
			switch {
			case !flowing && !tc.wantStarved:
				t.Errorf("the watch stopped getting events once %d unread streams held %d bytes: they starve the connection's flow-control window", floods, last)
			case flowing && tc.wantStarved:
				t.Errorf("the watch kept getting events with the connection window at %d bytes; the reproduction of the starvation no longer reproduces it", tc.cfg.MaxReceiveBufferPerConnection)
			}
		})
	}
}
