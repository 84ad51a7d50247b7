package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// handlersServingLong counts the goroutines inside Handler.serveLong: a
// taken-over HTTP/1.1 watch has none, its handler returned.
func handlersServingLong() int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "proxy.(*Handler).serveLong")
}

// TestH1WatchIsTakenOver: an HTTP/1.1 watch through the Server is
// streamed by the server, detached from its handler (h1stream.go). Its handler
// returns while the watch runs; events still arrive one by one; the
// answer says Connection: close and ends with the last chunk; and the
// request holds its --max-long-running slot and the gauges until the
// watch ends, not until its handler returned.
func TestH1WatchIsTakenOver(t *testing.T) {
	more := make(chan struct{})
	end := make(chan struct{})
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"ADDED","n":1}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"type":"ADDED","n":2}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-end:
		case <-r.Context().Done():
		}
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	m, _ := NewMetrics(nil)
	lm, _ := listener.NewMetrics(nil)
	s, _, base := startProxyOn(t, listener.Config{MaxLongRunning: 1}, lm, Config{}, p, u, m)
	client := testkit.NewClient(t, false)
	longInflight := listenerValue(t, lm, "fanout_downstream_inflight_requests", map[string]string{"kind": "long"})

	resp, err := client.Get(base + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !resp.Close || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("watch answer: Close=%v Transfer-Encoding=%v, want Connection: close and chunked", resp.Close, resp.TransferEncoding)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != `{"type":"ADDED","n":1}`+"\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	testkit.WaitFor(t, "the watch's handler to return (its connection taken over)", func() bool { return handlersServingLong() == 0 })

	// The handler returned, the watch is open: it still counts.
	if got := gaugeValue(t, m.openLong); got != 1 {
		t.Errorf("fanout_open_long_running_requests = %v during the watch, want 1", got)
	}
	if got := longInflight(); got != 1 {
		t.Errorf("fanout_downstream_inflight_requests{kind=long} = %v during the watch, want 1", got)
	}
	if code := getStatus(t, client, base+"/api/v1/pods?watch=true"); code != http.StatusTooManyRequests {
		t.Errorf("a second watch with --max-long-running 1 got %d, want 429: the first one's slot was given back while it ran", code)
	}

	close(more)
	if line, err := br.ReadString('\n'); err != nil || line != `{"type":"ADDED","n":2}`+"\n" {
		t.Fatalf("second event: %q, %v", line, err)
	}
	close(end)
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the apiserver ended the watch: %q, %v; want a clean end of the chunked body", rest, err)
	}
	waitDone(t, p, 1)
	testkit.WaitFor(t, "the long-running gauges to return to 0", func() bool { return gaugeValue(t, m.openLong) == 0 && longInflight() == 0 })
	if code := getStatus(t, client, base+"/api/v1/pods?watch=true"); code != http.StatusOK {
		t.Errorf("a watch after the first ended got %d, want 200: its slot was not given back", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestStopWaitsForTakenOverWatches: Server.Stop waits for the watches the
// server streams detached: when it returns they have ended, completely
// and accounted for.
func TestStopWaitsForTakenOverWatches(t *testing.T) {
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	m, _ := NewMetrics(nil)
	s, _, base := startProxy(t, Config{}, p, u, m)
	client := testkit.NewClient(t, false)
	const n = 5
	var bodies []*bufio.Reader
	for range n {
		_, br := openStream(t, context.Background(), client, base+"/api/v1/pods?watch=true")
		bodies = append(bodies, br)
	}
	testkit.WaitFor(t, "the watches' handlers to return", func() bool { return handlersServingLong() == 0 })

	ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop = %v, want nil: the watches end at once", err)
	}
	if got := gaugeValue(t, m.openLong); got != 0 {
		t.Errorf("fanout_open_long_running_requests = %v when Stop returned, want 0", got)
	}
	if got := len(p.Records()); got != n {
		t.Fatalf("%d picks, want %d", got, n)
	}
	for i, r := range p.Records() {
		if len(r.Dones) != 1 {
			t.Errorf("watch %d: Done called %d times when Stop returned, want 1", i, len(r.Dones))
		}
	}
	for i, br := range bodies {
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Errorf("watch %d after Stop: %q, %v; want a clean end", i, rest, err)
		}
	}
}

// BenchmarkRequestOnNewConnection prices what "Connection: close" on a
// taken-over watch costs the client: its next request (the re-watch,
// every 5-10 minutes per watch with client-go's defaults) dials loopback
// again instead of reusing the connection. "reused" and "new" are the
// same GET through the Server over a kept-alive and over a fresh
// connection; the difference is the dial. Each runs against both servers
// of plaintext HTTP/1.1 (--h1-server).
func BenchmarkRequestOnNewConnection(b *testing.B) {
	addr, rt := proxytest.NewBackend(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "{}")
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	for _, h1 := range []string{listener.H1ServerOwn, listener.H1ServerStd} {
		b.Run("h1-server="+h1, func(b *testing.B) {
			h := New(Config{}, p, u, nil)
			s := listener.New(listener.Config{ListenAddress: "127.0.0.1:0", H1Server: h1}, h, nil)
			if err := s.Start(b.Context()); err != nil {
				b.Fatal(err)
			}
			defer s.Stop(b.Context())
			url := "http://" + s.Addr().String() + "/api/v1/namespaces/default/configmaps/x"
			for _, fresh := range []bool{false, true} {
				b.Run(map[bool]string{false: "reused", true: "new"}[fresh], func(b *testing.B) {
					c := &http.Client{Transport: &http.Transport{DisableKeepAlives: fresh}}
					defer c.CloseIdleConnections()
					for b.Loop() {
						resp, err := c.Get(url)
						if err != nil {
							b.Fatal(err)
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
		})
	}
}

// TestClientLeavingEndsTakenOverWatch: a client leaving a watch the
// server streams detached ends the upstream request, reports the pick's
// Done and gives back the gauge. (Without the hang-up watcher the server
// reads the connection itself: internal/h1server's
// TestDetachedStreamClientLeaving.)
func TestClientLeavingEndsTakenOverWatch(t *testing.T) {
	cw := startCancelWatchProxy(t, Config{})
	resp, cancel := cw.openWatch(t, false)
	testkit.WaitFor(t, "the watch's handler to return (its connection taken over)", func() bool { return handlersServingLong() == 0 })
	cw.leave(t, resp, cancel)
}
