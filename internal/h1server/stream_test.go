package h1server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// streamServer serves /stream by detaching its answer with a body fed by
// events, a body that ends with the request's context (as an upstream
// request under it would), and OnStreamEnd closing ended.
type streamServer struct {
	s        *Server
	addr     string
	events   chan string
	returned chan struct{} // the handler returned
	canceled chan struct{} // the request's context ended
	ended    chan struct{} // OnStreamEnd's function ran
	detached chan bool
}

func startStreamServer(t *testing.T) *streamServer {
	t.Helper()
	ss := &streamServer{events: make(chan string), returned: make(chan struct{}), canceled: make(chan struct{}),
		ended: make(chan struct{}), detached: make(chan bool, 1)}
	ss.addr, ss.s = startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			io.WriteString(w, "plain")
			return
		}
		defer close(ss.returned)
		w.Header().Set("Content-Type", "application/json")
		ok := Detach(w, http.StatusOK, &eventBody{ctx: r.Context(), events: ss.events, canceled: ss.canceled})
		ss.detached <- ok
		if !ok {
			io.WriteString(w, "not detached")
			return
		}
		if !OnStreamEnd(w, func() { close(ss.ended) }) {
			t.Error("OnStreamEnd says the detached response is not")
		}
		if _, err := w.Write([]byte("late")); err == nil {
			t.Error("a Write after Detach succeeded")
		}
	}), Config{})
	return ss
}

func (ss *streamServer) get(t *testing.T, path string) *http.Response {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Get("http://" + ss.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// open gets /stream, reads its first event ("one") and waits for its
// handler to return: the stream runs detached.
func (ss *streamServer) open(t *testing.T) *http.Response {
	t.Helper()
	go func() { ss.events <- "one\n" }()
	resp := ss.get(t, "/stream")
	resp.Body = lineBody{bufio.NewReader(resp.Body), resp.Body}
	readEvent(t, resp, "one\n")
	testkit.Wait(t, ss.returned, "the handler to return")
	return resp
}

// eventBody gives one event per Read, io.EOF when events is closed, and
// the context's error once it ends.
type eventBody struct {
	ctx      context.Context
	events   chan string
	canceled chan struct{}
	pending  string
}

func (b *eventBody) Read(p []byte) (int, error) {
	if b.pending == "" {
		select {
		case e, ok := <-b.events:
			if !ok {
				return 0, io.EOF
			}
			b.pending = e
		case <-b.ctx.Done():
			close(b.canceled)
			return 0, b.ctx.Err()
		}
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *eventBody) Close() error { return nil }

func readEvent(t *testing.T, resp *http.Response, want string) {
	t.Helper()
	br, ok := resp.Body.(interface{ ReadString(byte) (string, error) })
	if !ok {
		t.Fatal("body is not line-readable")
	}
	if got, err := br.ReadString('\n'); err != nil || got != want {
		t.Fatalf("event %q, %v; want %q", got, err, want)
	}
}

// lineBody makes a response body readable line by line.
type lineBody struct {
	*bufio.Reader
	io.Closer
}

// TestDetach: a detached answer goes out chunked with Connection: close,
// its handler returns while it runs, its events reach the client one by
// one (a burst larger than the small buffer too), OnStreamEnd waits for
// its true end, and the body's io.EOF ends it cleanly.
func TestDetach(t *testing.T) {
	ss := startStreamServer(t)
	go func() { ss.events <- "one\n" }()
	resp := ss.get(t, "/stream")
	resp.Body = lineBody{bufio.NewReader(resp.Body), resp.Body}
	defer resp.Body.Close()
	if !resp.Close || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("answer: Close=%v Transfer-Encoding=%v, want Connection: close and chunked", resp.Close, resp.TransferEncoding)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want the handler's", ct)
	}
	readEvent(t, resp, "one\n")
	testkit.Wait(t, ss.returned, "the handler to return while its answer streams")
	select {
	case <-ss.ended:
		t.Fatal("OnStreamEnd's function ran before the stream ended")
	default:
	}
	big := strings.Repeat("x", 3*streamBuffer) + "\n"
	ss.events <- big
	readEvent(t, resp, big)
	ss.events <- "two\n"
	readEvent(t, resp, "two\n")
	close(ss.events)
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Errorf("after the body ended: %q, %v; want a clean end of the chunked answer", rest, err)
	}
	testkit.Wait(t, ss.ended, "OnStreamEnd's function to run at the stream's end")
}

// TestDetachedStreamClientLeaving: the client closing its connection
// ends the request's context, and with it the stream, with the hang-up
// watcher and without it (a goroutine per stream reads the socket).
func TestDetachedStreamClientLeaving(t *testing.T) {
	for _, watcher := range []bool{true, false} {
		t.Run(fmt.Sprintf("watcher=%v", watcher), func(t *testing.T) {
			ss := startStreamServer(t)
			if !watcher {
				ss.s.hangups.stop()
			}
			resp := ss.open(t)
			resp.Body.Close()
			testkit.Wait(t, ss.canceled, "the request's context to end after the client left")
			testkit.Wait(t, ss.ended, "OnStreamEnd's function to run")
		})
	}
}

// TestShutdownWaitsForStreams: Shutdown does not return while a detached
// stream runs; it does once the stream's body ended.
func TestShutdownWaitsForStreams(t *testing.T) {
	ss := startStreamServer(t)
	resp := ss.open(t)
	defer resp.Body.Close()
	stopped := make(chan error, 1)
	go func() { stopped <- ss.s.Shutdown(context.Background()) }()
	// Shutdown has closed the listener once a dial fails: it is then
	// waiting, and must still be.
	testkit.WaitFor(t, "Shutdown to begin", func() bool { return ss.s.shutting.Load() })
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v with a stream open", err)
	default:
	}
	close(ss.events)
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	testkit.Wait(t, ss.ended, "OnStreamEnd's function to run")
}

// TestDetachRefused: where an answer cannot be streamed as chunks on its
// own, Detach says false and the handler answers as usual.
func TestDetachRefused(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"HTTP/1.0", "GET /stream HTTP/1.0\r\n\r\n"},
		{"HEAD", "HEAD /stream HTTP/1.1\r\nHost: localhost\r\n\r\n"},
		{"a request body", "POST /stream HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nhi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := startStreamServer(t)
			exchange(t, ss.addr, tc.raw, 1, "")
			if <-ss.detached {
				t.Error("Detach succeeded")
			}
		})
	}
	for _, tc := range []struct {
		name   string
		code   int
		header string
	}{{"204", http.StatusNoContent, ""}, {"a length", 200, "Content-Length"}, {"trailers", 200, "Trailer"}} {
		t.Run(tc.name, func(t *testing.T) {
			detached := make(chan bool, 1)
			addr, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set(tc.header, "1")
				}
				detached <- Detach(w, tc.code, io.NopCloser(strings.NewReader("x")))
				w.WriteHeader(tc.code)
			}), Config{})
			exchange(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 1, "")
			if <-detached {
				t.Error("Detach succeeded")
			}
		})
	}
}

// TestChunk: the in-place chunk framing.
func TestChunk(t *testing.T) {
	for _, n := range []int{1, 15, 16, 255, 256, streamBuffer - chunkHead - 2, burstBuffer - chunkHead - 2} {
		buf := make([]byte, burstBuffer)
		copy(buf[chunkHead:], strings.Repeat("x", n))
		want := fmt.Sprintf("%x\r\n%s\r\n", n, strings.Repeat("x", n))
		if got := chunk(buf, n); string(got) != want {
			t.Errorf("chunk of %d bytes = %q, want %q", n, got, want)
		}
	}
}
