package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// watchEndFixture is a proxy behind a listener with one --max-long-running
// slot and a cost table, before a backend that answers a watch with one
// event and holds it until the request is canceled or, the first watch
// only, finish is closed.
type watchEndFixture struct {
	s        *listener.Server
	h        *Handler
	base     string
	p        *proxytest.Picker
	m        *Metrics
	tab      *cost.Table
	finish   chan struct{}
	inflight func() float64 // fanout_downstream_inflight_requests{kind=long}
}

func startWatchEnd(t *testing.T, h1 string) *watchEndFixture {
	t.Helper()
	f := &watchEndFixture{finish: make(chan struct{})}
	var watches atomic.Int32
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		finish := f.finish
		if watches.Add(1) > 1 {
			finish = nil
		}
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-finish:
		}
	}), false)
	f.p = proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	f.m, _ = NewMetrics(nil)
	lm, _ := listener.NewMetrics(nil)
	var err error
	f.tab, err = cost.New(cost.Config{Size: cost.DefaultSize, MetricsTop: cost.DefaultMetricsTop})
	if err != nil {
		t.Fatal(err)
	}
	f.s, f.h, f.base = startProxyOn(t, listener.Config{MaxLongRunning: 1, H1Server: h1}, lm, Config{Cost: f.tab}, f.p, u, f.m)
	f.inflight = listenerValue(t, lm, "fanout_downstream_inflight_requests", map[string]string{"kind": "long"})
	return f
}

// held is what a request holds until its end, as the gauges and counters
// show it: the --max-long-running slot, the open long-running gauge, the
// cost table's open watches, the replay budget, and the picks whose Done
// has not been reported.
type held struct {
	slot, openLong, watchesOpen, replay float64
	undone                              int
}

func (f *watchEndFixture) held(t *testing.T) held {
	t.Helper()
	var h held
	h.slot, h.openLong, h.replay = f.inflight(), gaugeValue(t, f.m.openLong), gaugeValue(t, f.m.replayUsed)
	for _, r := range f.tab.Snapshot().Rows {
		h.watchesOpen += float64(r.WatchesOpen)
	}
	for _, r := range f.p.Records() {
		h.undone += 1 - len(r.Dones)
	}
	return h
}

// TestWatchEndReleasesOnce: however a watch ends (the client goes away,
// the apiserver ends it, shutdown, the watch rebalancer), over HTTP/1.1
// (the answer detached from its handler, h1stream.go; with --h1-server
// std served by its handler to the end) or h2c, its end
// gives back everything it held, once: the listener's slot and gauge, the
// open long-running gauge, the cost table's open watch, the replay budget
// and the balancer's Done. Released twice, a gauge would read -1 once the
// server stopped and the slot would admit two watches at once; never, one
// would stay at 1.
func TestWatchEndReleasesOnce(t *testing.T) {
	for _, mode := range []string{"h1", "h1-std", "h2c"} {
		for _, how := range []string{"client leaves", "apiserver ends", "shutdown", "rebalanced"} {
			t.Run(mode+"/"+how, func(t *testing.T) {
				h2c := mode == "h2c"
				h1 := listener.H1ServerOwn
				if mode == "h1-std" {
					h1 = listener.H1ServerStd
				}
				f := startWatchEnd(t, h1)
				client := testkit.NewClient(t, h2c)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				resp, br := openStream(t, ctx, client, f.base+"/api/v1/pods?watch=true")
				if mode == "h1" {
					testkit.WaitFor(t, "the watch's handler to return (its answer detached)", func() bool { return handlersServingLong() == 0 })
				}
				if got, want := f.held(t), (held{slot: 1, openLong: 1, watchesOpen: 1, undone: 1}); got != want {
					t.Fatalf("while the watch is open: %+v, want %+v", got, want)
				}

				switch how {
				case "client leaves":
					cancel()
					resp.Body.Close()
				case "apiserver ends":
					close(f.finish)
				case "shutdown":
					stopCtx, stop := context.WithTimeout(context.Background(), testkit.WaitLimit)
					defer stop()
					if err := f.s.Stop(stopCtx); err != nil {
						t.Fatalf("Stop: %v", err)
					}
				case "rebalanced":
					// As the watch rebalancer ends a watch
					// (watch.watchStream): it says so, then closes the
					// body it reads from, on a goroutine of its own.
					f.h.longBodies.mu.Lock()
					var open []*doneBody
					for b := range f.h.longBodies.list.all() {
						open = append(open, b)
					}
					f.h.longBodies.mu.Unlock()
					if len(open) != 1 {
						t.Fatalf("%d open long-running bodies, want 1", len(open))
					}
					go func() {
						open[0].EndedByRebalancer()
						_ = open[0].Close()
					}()
				}
				if how != "client leaves" {
					// The client sees the end of the answer.
					_, _ = io.Copy(io.Discard, br)
				}
				// The slot is the first thing taken and the last given
				// back (reqinfo.Request.End runs the last registered
				// first): once it is, the end has run.
				testkit.WaitFor(t, "the watch's slot to be given back", func() bool { return f.inflight() == 0 })
				if got := f.held(t); got != (held{}) {
					t.Errorf("after the watch ended: %+v, want nothing held", got)
				}

				if how != "shutdown" {
					// One slot: a watch fits, a second one at the same
					// time does not, had the slot been given back twice.
					second, err := client.Get(f.base + "/api/v1/pods?watch=true")
					if err != nil {
						t.Fatal(err)
					}
					defer second.Body.Close()
					if second.StatusCode != http.StatusOK {
						t.Fatalf("a watch after the first ended: %d, want 200: the slot was not given back", second.StatusCode)
					}
					if code := getStatus(t, client, f.base+"/api/v1/pods?watch=true"); code != http.StatusTooManyRequests {
						t.Errorf("a second watch at once with one slot: %d, want 429: the slot was given back twice", code)
					}
					stopCtx, stop := context.WithTimeout(context.Background(), testkit.WaitLimit)
					defer stop()
					if err := f.s.Stop(stopCtx); err != nil {
						t.Fatalf("Stop: %v", err)
					}
					_, _ = io.Copy(io.Discard, second.Body)
				}
				// Every stream has ended once Stop returned: a gauge
				// released twice reads -1 now, and never goes back.
				if got := f.held(t); got != (held{}) {
					t.Errorf("after the server stopped: %+v, want nothing held", got)
				}
			})
		}
	}
}

// TestRoundTripperWatchEndReleasesOnce: the library's watch ends when its
// body reports an error (io.EOF included) and again when the caller closes
// it; what it held is given back once.
func TestRoundTripperWatchEndReleasesOnce(t *testing.T) {
	f := startWatchEnd(t, listener.H1ServerOwn)
	client := &http.Client{Transport: f.h.RoundTripper()}
	resp, err := client.Get("https://ignored.invalid/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, f.m.openLong); got != 1 {
		t.Fatalf("open long-running = %v during the watch, want 1", got)
	}
	close(f.finish)
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := f.held(t)
	got.slot = 0 // the library has no listener
	if got != (held{}) {
		t.Errorf("after the watch ended and was closed: %+v, want nothing held", got)
	}
}
