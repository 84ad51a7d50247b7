package sidecar

import (
	"crypto/tls"
	"net/http"
	"runtime"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestWatchStack guards what an open watch costs fanout in goroutine stack
// over HTTP/2 (h2c here; HTTP/2 over TLS with --listen-tls is served by
// the same handlers). The watch's handler goroutine writes the request's
// HEADERS upstream through TLS, which grows its stack past 8 KiB, and then
// stays parked in the reverse proxy's copy for the watch's life. The
// collector halves a parked stack only while it uses less than a quarter
// of it: parked under 4 KiB, the stack goes back to 8 KiB; over it, each
// open watch keeps 16 KiB. Four strings more in reqinfo.Info (0d4357b)
// tipped it over, and the footprint bench's stacks per h2c watch went
// from 8.4 to 16.6 KiB.
//
// fanout's share is measured as the stack the open watches add through
// fanout less what the same number of watches add straight to the
// apiservers (their own handlers, the same in both), each after enough
// collections to shrink every parked stack: structural, not timed.
func TestWatchStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector deepens every frame; make unit runs this test without it")
	}
	const (
		watches = 100
		// Between the 8 KiB a parked handler should keep and the 16 KiB
		// it keeps when its frames are too deep to shrink.
		bound = 12 << 10
		path  = "/api/v1/namespaces/default/configmaps?watch=true"
	)
	f := startSidecar(t, "", "round-robin")
	hold := make(chan struct{})
	for _, s := range f.servers {
		s.holdWatches.Store(&hold)
	}
	t.Cleanup(func() { close(hold) })

	direct := &http.Client{Transport: &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{RootCAs: f.ca.Pool, ServerName: "kubernetes"},
	}}
	t.Cleanup(direct.CloseIdleConnections)
	upstream := stackPerWatch(t, direct, f.servers[0].URL+path, watches)

	through := stackPerWatch(t, testkit.NewClient(t, true), "http://"+f.proxy.Addr().String()+path, watches)
	fanout := through - upstream
	t.Logf("stack per open watch: %.0f B through fanout, %.0f B of it the apiservers' (straight to one: %.0f B); fanout's %.0f B",
		through, upstream, upstream, fanout)
	if fanout > bound {
		t.Errorf("each watch open over h2c keeps %.1f KiB of fanout's goroutine stacks, want at most %d KiB: "+
			"the handler parked in the reverse proxy's copy uses a quarter of its stack or more, so the collector "+
			"cannot shrink it (docs/footprint.md)", fanout/1024, bound>>10)
	}
}

// stackPerWatch opens n watches at url with c, keeps them open for the
// test, and says by how many bytes of goroutine stack each grew the
// process, read after collections that shrink what parked goroutines do
// not use. One watch opened and ended first makes the connections.
func stackPerWatch(t *testing.T, c *http.Client, url string, n int) float64 {
	t.Helper()
	open := func() *http.Response {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", url, resp.Status)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	open().Body.Close()
	before := stackInuse()
	for range n {
		open()
	}
	return float64(stackInuse()-before) / float64(n)
}

// stackInuse is runtime.MemStats.StackInuse after four collections: each
// may halve a parked goroutine's stack once.
func stackInuse() uint64 {
	for range 4 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}
