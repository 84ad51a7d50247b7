package h2conn

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// windowOf is what a stream holds and was granted: its unread data, its
// window, what it borrowed from the budget, and whether it is still open
// with the server unable to send (its window used up).
func windowOf(res *http.Response) (buffered, size, borrowed int, stalled bool) {
	s := res.Body.(*responseBody).s
	s.cc.mu.Lock()
	defer s.cc.mu.Unlock()
	return len(s.buf) - s.off, s.size, s.borrowed, s.cc.streams[s.id] == s && s.window == 0
}

// readUntil reads res's body at full speed until grown says so, or fails
// after limit bytes.
func readUntil(t *testing.T, res *http.Response, limit int64, what string, grown func() bool) int64 {
	t.Helper()
	buf := make([]byte, 32<<10)
	var read int64
	for !grown() {
		if read >= limit {
			t.Fatalf("%s: not reached after reading %d bytes at full speed", what, read)
		}
		n, err := res.Body.Read(buf)
		read += int64(n)
		if err != nil {
			t.Fatalf("%s: reading: %v", what, err)
		}
	}
	return read
}

// TestWindowBudgetBoundsUnreadAnswersInSum: streams read at full speed
// grow their windows with the budget, then nobody reads them, and the
// server sends until it can send no more. What the connection holds in
// unread data, all streams together, stays within the floor per stream
// plus the budget, and the budget's use is what the streams borrowed:
// without the budget (each stream granted its window whatever the
// others hold) the same streams hold a full window each.
func TestWindowBudgetBoundsUnreadAnswersInSum(t *testing.T) {
	const (
		streams = 40
		limit   = 4 << 20
		window  = 1 << 20
		floor   = DefaultMinReceiveBufferPerStream
	)
	used := prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"})
	exhausted := prometheus.NewCounter(prometheus.CounterOpts{Name: "exhausted"})
	b := budget.New(limit, used, exhausted)
	p := testkit.NewPKI(t, serverName)
	srv := newFloodServer(t, p, 100)
	rt := newClients(t, p, Config{WindowBudget: b, MaxReceiveBufferPerStream: window}).For(srv.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var ress []*http.Response
	defer func() {
		for _, res := range ress {
			res.Body.Close()
		}
	}()
	for i := range streams {
		res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/flood"))
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		ress = append(ress, res)
		// Read until the window is whole or the budget refuses it more
		// (or 64 MiB came: the window no longer limited it).
		refused := testutil.ToFloat64(exhausted)
		buf := make([]byte, 32<<10)
		for read := 0; read < 64<<20; {
			if _, size, _, _ := windowOf(res); size == window || testutil.ToFloat64(exhausted) > refused {
				break
			}
			n, err := res.Body.Read(buf)
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			read += n
		}
	}
	if n := srv.opened.Load(); n != 1 {
		t.Fatalf("the streams used %d connections, want 1", n)
	}
	// Nobody reads any more: wait until the server can send nothing more
	// on any of them.
	testkit.WaitFor(t, "every unread stream's window used up", func() bool {
		for _, res := range ress {
			if _, _, _, stalled := windowOf(res); !stalled {
				return false
			}
		}
		return true
	})
	var held, borrowed int
	full := 0
	for _, res := range ress {
		buffered, size, bor, _ := windowOf(res)
		held += buffered
		borrowed += bor
		if size == window {
			full++
		}
	}
	t.Logf("%d unread streams hold %d bytes (%d of them at the full %d-byte window); budget in use %d of %d, refused %v times",
		streams, held, full, window, b.Used(), limit, testutil.ToFloat64(exhausted))
	if bound := streams*floor + limit; held > bound {
		t.Errorf("%d unread streams hold %d bytes, over %d (the %d-byte floor each and the %d-byte budget)", streams, held, bound, floor, limit)
	}
	if b.Used() > limit || int64(borrowed) != b.Used() || testutil.ToFloat64(used) != float64(b.Used()) {
		t.Errorf("budget in use %d (gauge %v), the streams borrowed %d; want them equal and at most %d", b.Used(), testutil.ToFloat64(used), borrowed, limit)
	}
	// The scenario must have pushed the budget: streams grew while it
	// had room, and past it they were refused.
	if b.Used() < limit/2 || testutil.ToFloat64(exhausted) == 0 || held <= streams*floor {
		t.Errorf("the budget was not pushed: %d bytes of it in use, %v refusals, %d bytes held", b.Used(), testutil.ToFloat64(exhausted), held)
	}
	for _, res := range ress {
		res.Body.Close()
	}
	ress = nil
	if b.Used() != 0 || testutil.ToFloat64(used) != 0 {
		t.Errorf("after every body closed the budget holds %d (gauge %v), want 0", b.Used(), testutil.ToFloat64(used))
	}
}

// TestWindowBudgetGivenBackOnEveryEnd: a stream that grew its window with
// the budget gives it all back however it ends: its body read to the
// end, closed early, the stream reset by the server, the connection
// lost. Bytes still buffered past the floor stay covered until the body
// is read or closed.
func TestWindowBudgetGivenBackOnEveryEnd(t *testing.T) {
	const resetAfter = 2 << 20
	release := make(chan struct{})
	p := testkit.NewPKI(t, serverName)
	chunk := make([]byte, 16<<10)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 100, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
		for sent := 0; n == 0 || sent < n; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		if r.URL.Query().Get("then") == "reset" {
			w.(http.Flusher).Flush()
			<-release
			panic(http.ErrAbortHandler) // RST_STREAM
		}
	}))
	defer close(release)

	for _, tc := range []struct {
		name string
		path string
		end  func(t *testing.T, res *http.Response, read int64)
	}{
		{"read to its end", "/?bytes=" + strconv.Itoa(16<<20), func(t *testing.T, res *http.Response, _ int64) {
			if _, err := io.Copy(io.Discard, res.Body); err != nil {
				t.Fatal(err)
			}
		}},
		{"closed early", "/", func(t *testing.T, res *http.Response, _ int64) { res.Body.Close() }},
		{"reset by the server", "/?bytes=" + strconv.Itoa(resetAfter) + "&then=reset", func(t *testing.T, res *http.Response, read int64) {
			// All but 100 KiB read, which the window holds: the server
			// wrote it all and waits to reset the stream.
			if _, err := io.CopyN(io.Discard, res.Body, resetAfter-read-100<<10); err != nil {
				t.Fatal(err)
			}
			release <- struct{}{}
			s := res.Body.(*responseBody).s
			testkit.WaitFor(t, "the reset", func() bool { s.cc.mu.Lock(); defer s.cc.mu.Unlock(); return s.err != nil })
			// What is still buffered past the floor stays taken until
			// it is read.
			buffered, _, borrowed, _ := windowOf(res)
			if want := max(0, buffered-DefaultMinReceiveBufferPerStream); borrowed != want {
				t.Errorf("after the reset the stream borrows %d with %d bytes buffered, want %d", borrowed, buffered, want)
			}
			var se http2.StreamError
			if _, err := io.Copy(io.Discard, res.Body); !errors.As(err, &se) {
				t.Errorf("reading after the reset: %v, want the stream error", err)
			}
		}},
		{"connection lost", "/", func(t *testing.T, res *http.Response, _ int64) {
			res.Body.(*responseBody).s.cc.conn.Close()
			if _, err := io.Copy(io.Discard, res.Body); err == nil {
				t.Error("reading after the connection was lost: no error")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := budget.New(8<<20, nil, nil)
			rt := newClients(t, p, Config{WindowBudget: b}).For(srv.addr)
			res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, tc.path))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			read := readUntil(t, res, 1<<20, "a window of 64 KiB", func() bool {
				_, size, _, _ := windowOf(res)
				return size >= 64<<10
			})
			if b.Used() == 0 {
				t.Fatal("the stream grew without taking budget")
			}
			tc.end(t, res, read)
			if u := b.Used(); u != 0 {
				t.Errorf("after the stream ended (%s) the budget holds %d bytes, want 0", tc.name, u)
			}
		})
	}
}

// BenchmarkLargeAnswer reads a 100 MiB answer at full speed, as a LIST
// of a large resource: with every stream granted its 1 MiB window up
// front (no budget, as before the answer window budget) and with the
// window grown from the 2 KiB floor with a budget that has room.
func BenchmarkLargeAnswer(b *testing.B) {
	const size = 100 << 20
	p := testkit.NewPKI(b, serverName)
	chunk := make([]byte, 32<<10)
	srv := newH2Server(b, p, tls.RequireAndVerifyClientCert, 100, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"no budget", Config{}},
		{"budget", Config{WindowBudget: budget.New(64<<20, nil, nil)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rt := newClients(b, p, bc.cfg).For(srv.addr)
			buf := make([]byte, 32<<10)
			b.SetBytes(size)
			for b.Loop() {
				res, err := rt.RoundTrip(testkit.NewRequest(b, context.Background(), srv.addr, "/"))
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{res.Body}, buf); err != nil || n != size {
					b.Fatalf("read %d bytes, %v", n, err)
				}
				_, window, _, _ := windowOf(res)
				b.ReportMetric(float64(window>>10), "window-KiB")
				res.Body.Close()
			}
		})
	}
}

// TestWindowBudgetUnreadStreamsDoNotStarveTheConnection: with the budget,
// as without (TestUnreadStreamsDoNotStarveTheConnection), streams nobody
// reads stall only themselves: a watch on the same connection keeps
// getting its events once every unread stream's window is used up.
func TestWindowBudgetUnreadStreamsDoNotStarveTheConnection(t *testing.T) {
	const floods = 24
	p := testkit.NewPKI(t, serverName)
	srv := newFloodServer(t, p, 100)
	rt := newClients(t, p, Config{WindowBudget: budget.New(64<<20, nil, nil)}).For(srv.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	got := watchEvents(t, ctx, rt, srv.addr)
	ress := unreadFloods(t, ctx, rt, srv.addr, floods)
	testkit.WaitFor(t, "every unread stream's window used up", func() bool {
		for _, res := range ress {
			if _, _, _, stalled := windowOf(res); !stalled {
				return false
			}
		}
		return true
	})
	before := got.Load()
	testkit.WaitFor(t, "the watch's events after the unread streams stalled", func() bool { return got.Load() > before+1024 })
}

// TestShortAnswerWindow: a short request's stream starts with
// ShortAnswerWindow while the budget has room, taken from it and given
// back when the body closes; a watch's (RoundTrip) starts at the floor,
// and so does a short one the budget cannot spare.
func TestShortAnswerWindow(t *testing.T) {
	const short = 64 << 10
	p := testkit.NewPKI(t, serverName)
	srv := newFloodServer(t, p, 100)
	for _, tc := range []struct {
		name   string
		budget int64
		short  bool
		want   int // the window the server filled
	}{
		{"short request", 1 << 20, true, short},
		{"watch", 1 << 20, false, DefaultMinReceiveBufferPerStream},
		{"short request, budget spent", short / 2, true, DefaultMinReceiveBufferPerStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := budget.New(tc.budget, nil, nil)
			rt := newClients(t, p, Config{WindowBudget: b}).For(srv.addr)
			cc, err := rt.get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			send := cc.RoundTrip
			if tc.short {
				send = cc.RoundTripShort
			}
			res, err := send(testkit.NewRequest(t, context.Background(), srv.addr, "/flood"))
			if err != nil {
				t.Fatal(err)
			}
			// Nothing is read, so the window never grows: the server
			// fills what the stream was granted at its start.
			testkit.WaitFor(t, "the server to fill the stream's window", func() bool { _, _, _, stalled := windowOf(res); return stalled })
			buffered, size, borrowed, _ := windowOf(res)
			if buffered != tc.want || size != tc.want {
				t.Errorf("the server sent %d bytes into a window of %d, want %d", buffered, size, tc.want)
			}
			if int64(borrowed) != b.Used() || borrowed != tc.want-DefaultMinReceiveBufferPerStream {
				t.Errorf("borrowed %d, budget in use %d; want both %d", borrowed, b.Used(), tc.want-DefaultMinReceiveBufferPerStream)
			}
			res.Body.Close()
			if u := b.Used(); u != 0 {
				t.Errorf("after the body closed the budget holds %d bytes, want 0", u)
			}
		})
	}
}
