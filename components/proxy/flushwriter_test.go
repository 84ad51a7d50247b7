package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// flushRecorder counts the flushes that reach the connection's writer and
// signals each one.
type flushRecorder struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	flushes int
	flushed chan struct{}
}

func newFlushRecorder() *flushRecorder {
	return &flushRecorder{ResponseRecorder: httptest.NewRecorder(), flushed: make(chan struct{}, 100)}
}

func (r *flushRecorder) Flush() {
	r.mu.Lock()
	r.flushes++
	r.mu.Unlock()
	r.ResponseRecorder.Flush()
	r.flushed <- struct{}{}
}

func (r *flushRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushes
}

// TestFlushWriterKeepsABurstTogether: the reverse proxy flushes after every
// Write; with a 1 KiB copy buffer a 20 KiB event would be 20 flushes (20
// chunks, 20 writes to the socket). Writes that filled the buffer are not
// flushed; the short one that ends the burst flushes them all.
func TestFlushWriterKeepsABurstTogether(t *testing.T) {
	rec := newFlushRecorder()
	fw := newFlushWriter(rec, 1024)
	// The burst below is back to back, but a loaded machine (-race in CI)
	// may pause it for longer than the 1 ms timer, which would then flush
	// in its middle: the timer has a test of its own below.
	fw.delay = time.Hour
	defer fw.stop()
	full := make([]byte, 1024)
	for range 20 {
		if _, err := fw.Write(full); err != nil {
			t.Fatal(err)
		}
		fw.Flush()
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d flushes during the burst, want 0", n)
	}
	if _, err := fw.Write(full[:100]); err != nil {
		t.Fatal(err)
	}
	fw.Flush()
	if n := rec.count(); n != 1 {
		t.Fatalf("%d flushes after the burst ended, want 1", n)
	}
	if got := rec.Body.Len(); got != 20*1024+100 {
		t.Fatalf("wrote %d bytes, want %d", got, 20*1024+100)
	}
}

// TestFlushWriterFlushesABurstEndingAtTheBoundary: when the last Read of a
// burst filled the buffer exactly, nothing more comes to trigger the flush;
// the timer must, or the client would see the event only with the next.
func TestFlushWriterFlushesABurstEndingAtTheBoundary(t *testing.T) {
	rec := newFlushRecorder()
	fw := newFlushWriter(rec, 1024)
	defer fw.stop()
	if _, err := fw.Write(make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	fw.Flush()
	select {
	case <-rec.flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("a burst that ended at the buffer boundary was never flushed")
	}
}

// TestFlushWriterIsInertAfterStop: the burst timer must not touch the
// ResponseWriter once the handler returned (net/http reuses it).
func TestFlushWriterIsInertAfterStop(t *testing.T) {
	rec := newFlushRecorder()
	fw := newFlushWriter(rec, 1024)
	_, _ = fw.Write(make([]byte, 1024))
	fw.Flush() // arms the timer
	fw.stop()
	fw.flushNow() // what the timer would do
	if n := rec.count(); n != 0 {
		t.Fatalf("%d flushes after stop, want 0", n)
	}
	if _, err := fw.Write([]byte("x")); err == nil {
		t.Fatal("Write after stop succeeded")
	}
}

// TestWatchEventsLargerThanTheCopyBufferArriveWhole: through the proxy, a
// watch whose events are many copy buffers long, one of them ending exactly
// at a buffer boundary, delivers every event without waiting for the next.
func TestWatchEventsLargerThanTheCopyBufferArriveWhole(t *testing.T) {
	next := make(chan string)
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case ev := <-next:
				_, _ = io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		}
	}), false)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	_, _, base := startProxy(t, Config{}, proxytest.NewPicker(addr), u, nil)
	resp, err := testkit.NewClient(t, false).Get(base + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for _, size := range []int{10 * longCopyBuffer, 3*longCopyBuffer + 17, 4 * longCopyBuffer, 100} {
		// An event of exactly size bytes, newline included.
		ev := `{"type":"MODIFIED","object":{"x":"` + strings.Repeat("a", size-len(`{"type":"MODIFIED","object":{"x":""}}`)-1) + `"}}` + "\n"
		if len(ev) != size {
			t.Fatalf("built an event of %d bytes, want %d", len(ev), size)
		}
		go func() { next <- ev }()
		done := make(chan error, 1)
		go func() {
			line, err := br.ReadString('\n')
			if err == nil && line != ev {
				err = io.ErrUnexpectedEOF
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("event of %d bytes: %v", size, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event of %d bytes did not arrive before the next one was sent", size)
		}
	}
}
