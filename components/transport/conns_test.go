package transport

import (
	"context"
	"sync"
	"testing"

	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestStreamlessConnectionsClosed: an apiserver whose SETTINGS allow no
// stream (MAX_CONCURRENT_STREAMS 0) answers the first request of each
// connection (sent before its SETTINGS arrive) and then none. Each request
// dials again; the connection before, which can take no stream, is closed
// then rather than kept for the idle timeout, so 100 requests leave at
// most a few open.
func TestStreamlessConnectionsClosed(t *testing.T) { forEachClient(t, testStreamlessConnectionsClosed) }

func testStreamlessConnectionsClosed(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	srv := newRawH2(t, p, true, respond200)
	srv.mu.Lock()
	srv.serverSettings = []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 0}}
	srv.mu.Unlock()
	tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	rt := tr.For(srv.Addr, AuthSidecar)
	for range 100 {
		// Errors are allowed (a connection whose SETTINGS came first
		// takes no stream); connections left open are not.
		if res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.Addr, "/")); err == nil {
			res.Body.Close()
		}
	}
	const most = 2
	if got := connGauge(t, tr, srv.Addr, AuthSidecar); got > most {
		t.Errorf("fanout_upstream_connections = %v after 100 requests to a server allowing no stream, want at most %d", got, most)
	}
	testkit.WaitFor(t, "the server to see its connections closed", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.open <= most
	})
}

// TestConnectionsPerPoolCapped: an apiserver that allows one stream per
// connection, and holds every stream it takes, gets at most
// maxConnsPerPool connections however many requests come; the requests
// past the cap fail as unprocessed (another endpoint may take them).
func TestConnectionsPerPoolCapped(t *testing.T) { forEachClient(t, testConnectionsPerPoolCapped) }

func testConnectionsPerPoolCapped(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	held := make(chan struct{}, 1)
	var mu sync.Mutex
	streams := map[*http2.Framer]int{}
	srv := newRawH2(t, p, true, func(fr *http2.Framer, id uint32) bool {
		mu.Lock()
		streams[fr]++
		first := streams[fr] == 1
		mu.Unlock()
		if !first {
			fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
			return false
		}
		held <- struct{}{}
		return false
	})
	srv.mu.Lock()
	srv.serverSettings = []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1}}
	srv.mu.Unlock()
	tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	rt := tr.For(srv.Addr, AuthSidecar)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	refused, taken := 0, 0
	for range maxConnsPerPool + 10 {
		failed := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := testkit.RoundTrip(rt, testkit.NewRequest(t, ctx, srv.Addr, "/"))
			failed <- err
		}()
		select {
		case <-held:
			// The next request must see this connection full: its
			// client has applied the SETTINGS once it acknowledged them.
			taken++
			testkit.WaitFor(t, "the client to acknowledge the server's SETTINGS", func() bool {
				srv.mu.Lock()
				defer srv.mu.Unlock()
				return srv.acks >= taken
			})
		case err := <-failed:
			if !IsUnprocessed(err) {
				t.Fatalf("a request failed with %v, want an unprocessed error", err)
			}
			refused++
		}
	}
	if got := connGauge(t, tr, srv.Addr, AuthSidecar); got > maxConnsPerPool {
		t.Errorf("fanout_upstream_connections = %v, want at most %d", got, maxConnsPerPool)
	}
	if refused < 10 {
		t.Errorf("%d requests failed as unprocessed, want at least the 10 past the cap", refused)
	}
	cancel()
	wg.Wait()
}
