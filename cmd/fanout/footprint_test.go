package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// Per-watch budgets of the footprint guard: what one open, idle watch may
// hold inside the fanout process. They are structural (goroutines, bytes
// counted by the runtime after a GC), not timings. Measured with 200
// watches (go test -run TestFootprintPerWatch -v ./cmd/fanout/ logs the
// figures); see docs/footprint.md for what each byte is.
//
//   - HTTP/1.1: the answer is detached from its handler once the watch's
//     headers are in (internal/h1server, Detach): one goroutine copies the
//     body to the socket; the upstream stream holds none (fanout's own
//     HTTP/2 client, internal/h2conn); the client closing the connection
//     is noticed by one goroutine for all watches (the server's epoll
//     hang-up watcher); no serve goroutine or buffers wait meanwhile;
//   - h1-std: HTTP/1.1 served by net/http's server (--h1-server std),
//     for comparison: the connection's goroutine, running the watch's
//     handler, blocked in the copy, and net/http's background read of
//     the connection, which notices the client closing it; the
//     connection's buffers wait with them;
//   - h2c: the stream's handler goroutine.
//
// The watches are made from a resourceVersion, as client-go's reflectors
// make them, so that the first event goes through the 410 check.
//
// The heap budgets are 3% over what was measured with the own HTTP/2
// client, freshness requests, the request's end in internal/reqinfo and
// the answer window budget's per-stream state (6.14-6.24 KiB for
// HTTP/1.1, 12.54-12.74 KiB for h2c, five runs; 0.2-0.3 KiB of it the
// URL and header of the request a watch was sent as, kept for its
// freshness request, components/watch/freshness.go): adding back a cut
// of docs/footprint.md ("A watch holds less while open"), or x/net's
// per-stream state, fails.
// h1-std's heap budget is 3% over its heap (19.87-19.97 KiB, five
// runs; stacks 18.2-18.9 KiB): heap and stacks together nearly four
// times HTTP/1.1's with fanout's own server.
// Stacks vary more between runs (4.0-4.3 KiB for HTTP/1.1, 8.3-9.6 KiB
// for h2c): a stack is 2, 4, 8 or 16 KiB, and where a goroutine starts
// depends on the runtime's adaptive first stack size. So their budgets sit
// halfway to the next size, 6 and 12 KiB: an h2c watch's handler goroutine
// grows to 16 KiB while it writes the request upstream, and the collector
// gives half of it back only while the frames it stays parked below use
// less than a quarter of it (minus the runtime's 800-byte reserve). Those
// frames once grew past that and every h2c watch kept 16.6 KiB, inside
// the budget of 20 KiB then (docs/footprint.md, "An h2c watch's stack
// back to 8 KiB").
// The goroutine budget of one is the tight guard against a goroutine per
// watch added back (as x/net's HTTP/2 client had, waiting for
// END_STREAM): one more.
var footprintBudgets = map[string]struct {
	goroutines   float64
	heap, stacks float64 // bytes: live heap after GC, goroutine stacks
}{
	"h1":     {goroutines: 1, heap: 6.4 * 1024, stacks: 6 << 10},
	"h1-std": {goroutines: 2, heap: 20.6 * 1024, stacks: 24 << 10},
	"h2c":    {goroutines: 1, heap: 13.1 * 1024, stacks: 12 << 10},
}

// footprintUpstream is the --upstream-http2 TestFootprintPerWatch runs
// fanout with. The budgets are the own client's: with std the test
// measures (logs the figures) and judges nothing.
var footprintUpstream = flag.String("footprint-upstream-http2", "own", "--upstream-http2 of TestFootprintPerWatch: own, or std to measure net/http's HTTP/2 client")

// TestFootprintPerWatch is the guard on what an idle watch costs the
// sidecar: it runs the fanout binary in front of an HTTP/2 mTLS upstream,
// opens footprintWatches watches through it, and compares the process's
// goroutine count and its live heap plus stacks (runtime.MemStats after
// GCs, read through --enable-pprof) with and without them.
func TestFootprintPerWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("opens hundreds of connections")
	}
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
	upstream := tlsUpstream(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintln(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}`)
			return
		}
		fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"1"}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}), testkit.WithHTTP2(&http.HTTP2Config{MaxConcurrentStreams: 1000}))

	for _, mode := range []string{"h1", "h1-std", "h2c"} {
		t.Run(mode, func(t *testing.T) {
			extra := []string{"--upstream-http2", *footprintUpstream}
			if mode == "h1-std" {
				extra = append(extra, "--h1-server", "std")
			}
			f := startFootprintFanout(t, bin, ca, upstream.URL, extra...)
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: footprintWatches}}
			if mode == "h2c" {
				tr := c.Transport.(*http.Transport)
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			defer c.CloseIdleConnections()
			// The first request dials the upstream connection and fills
			// the pools: not a cost per watch.
			if resp, err := c.Get(f.server + "/api/v1/namespaces/default/configmaps/a"); err != nil {
				t.Fatal(err)
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			before := f.stats(t)
			stop := openIdleWatches(t, c, f.server, footprintWatches)
			defer stop()
			after := f.stats(t)
			n := float64(footprintWatches)
			goroutines := float64(after.goroutines-before.goroutines) / n
			heap := (float64(after.heapAlloc) - float64(before.heapAlloc)) / n
			stack := (float64(after.stackInuse) - float64(before.stackInuse)) / n
			t.Logf("%s, --upstream-http2=%s: per watch: %.2f goroutines, %.2f KiB heap (live, after GC), %.2f KiB stacks, %.2f KiB together",
				mode, *footprintUpstream, goroutines, heap/1024, stack/1024, (heap+stack)/1024)
			if *footprintUpstream != "own" {
				return
			}
			b := footprintBudgets[mode]
			// A goroutine more per watch is 1.0 more; the slack only
			// absorbs the odd goroutine that came or went meanwhile.
			if goroutines > b.goroutines+0.05 {
				t.Errorf("%s: %.2f goroutines per idle watch, budget %.0f: a per-watch goroutine was added", mode, goroutines, b.goroutines)
			}
			if mode == "h1-std" && goroutines < b.goroutines-0.05 {
				t.Errorf("h1-std: %.2f goroutines per idle watch, want 2 (net/http's connection goroutine and its background read): --h1-server std did not serve the watches",
					goroutines)
			}
			if heap > b.heap {
				t.Errorf("%s: %.1f KiB of heap per idle watch, budget %.1f KiB: something now holds more per watch; profile it with fanout-bench footprint (docs/footprint.md)",
					mode, heap/1024, b.heap/1024)
			}
			if stack > b.stacks {
				t.Errorf("%s: %.1f KiB of goroutine stacks per idle watch, budget %.1f KiB: a per-watch goroutine now runs deeper; profile it with fanout-bench footprint (docs/footprint.md)",
					mode, stack/1024, b.stacks/1024)
			}
		})
	}
}

// footprintWatches is how many watches the guard opens: enough that one
// more buffer per watch stands out from the process's own fluctuations.
const footprintWatches = 200

type footprintFanout struct {
	server, admin string
	pid           int
}

type runtimeStats struct {
	goroutines            int
	heapAlloc, stackInuse uint64
}

// startFootprintFanout runs the binary with --enable-pprof in front of
// upstream and returns its proxy and admin URLs.
func startFootprintFanout(t *testing.T, bin string, ca *testkit.CA, upstream string, extra ...string) *footprintFanout {
	t.Helper()
	dir := t.TempDir()
	kc := clientKubeconfig(t, dir, ca, "footprint", upstream)
	written := filepath.Join(dir, "client.kubeconfig")
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"--kubeconfig", kc,
		"--listen-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0", "--enable-pprof",
		"--write-kubeconfig", written, "--allow-shared-loopback"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	admin := make(chan string, 1)
	var logMu sync.Mutex
	var logged []string // for the failure message
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logged = append(logged, line)
			logMu.Unlock()
			if _, a, ok := strings.Cut(line, `msg="admin server listening" address=`); ok && !sent {
				admin <- "http://" + strings.Fields(a)[0]
				sent = true
			}
		}
	}()
	f := &footprintFanout{pid: cmd.Process.Pid}
	select {
	case f.admin = <-admin:
	case <-time.After(30 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("fanout did not log its admin address within 30s; it logged:\n%s", strings.Join(logged, "\n"))
	}
	for deadline := time.Now().Add(30 * time.Second); f.server == ""; {
		if raw, err := os.ReadFile(written); err == nil {
			for _, line := range strings.Split(string(raw), "\n") {
				if s, ok := strings.CutPrefix(strings.TrimSpace(line), "server: "); ok {
					f.server = s
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("fanout did not write its kubeconfig within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f
}

// stats reads the goroutine count and, after a few GCs (stacks shrink by
// half per GC while they use less than a quarter), the live heap and the
// stacks in use.
func (f *footprintFanout) stats(t *testing.T) runtimeStats {
	t.Helper()
	get := func(path string) string {
		resp, err := http.Get(f.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v", path, resp.Status, err)
		}
		return string(b)
	}
	for range 4 {
		get("/debug/pprof/heap?gc=1")
	}
	var s runtimeStats
	for _, line := range strings.Split(get("/debug/pprof/heap?gc=1&debug=1"), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok {
			continue
		}
		v, _, _ = strings.Cut(v, " / ") // "Stack = inuse / sys"
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "HeapAlloc":
			s.heapAlloc = n
		case "Stack":
			s.stackInuse = n
		}
	}
	first, _, _ := strings.Cut(get("/debug/pprof/goroutine?debug=1"), "\n")
	if _, err := fmt.Sscanf(first, "goroutine profile: total %d", &s.goroutines); err != nil {
		t.Fatalf("goroutine profile starts %q: %v", first, err)
	}
	if s.heapAlloc == 0 || s.stackInuse == 0 {
		t.Fatalf("no HeapAlloc or Stack in the heap profile's MemStats: %+v", s)
	}
	return s
}

// openIdleWatches opens n watches and waits until each got its first
// event, so that each is fully set up and then idle.
func openIdleWatches(t *testing.T, c *http.Client, server string, n int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ready := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
				// From a resourceVersion, as client-go's reflectors watch:
				// the watch's first event then goes through the 410 check
				// (components/watch/gone.go).
				fmt.Sprintf("%s/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&labelSelector=w%%3D%d", server, i), nil)
			resp, err := c.Do(req)
			if err != nil {
				ready <- err
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReaderSize(resp.Body, 256)
			if _, err := br.ReadString('\n'); err != nil {
				ready <- fmt.Errorf("first event: %w", err)
				return
			}
			ready <- nil
			_, _ = io.Copy(io.Discard, br)
		})
	}
	stop = func() { cancel(); wg.Wait() }
	for range n {
		select {
		case err := <-ready:
			if err != nil {
				stop()
				t.Fatalf("opening watches: %v", err)
			}
		case <-time.After(60 * time.Second):
			stop()
			t.Fatal("watches not open within 60s")
		}
	}
	return stop
}
