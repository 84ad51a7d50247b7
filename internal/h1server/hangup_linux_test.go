//go:build linux

package h1server

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestH1ServerClientLeavingCancelsRequest: the client closing its
// connection mid-request cancels the request's context, which net/http
// notices with a reader goroutine per request and fanout's server with
// the hang-up watcher.
func TestH1ServerClientLeavingCancelsRequest(t *testing.T) {
	arrived, canceled := make(chan struct{}), make(chan struct{})
	addr, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(canceled)
	}), Config{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// A first request on the connection, so that the one left is not its
	// first (the watcher covers the connection for its life).
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n")
	testkit.Wait(t, arrived, "the request to reach the handler")
	c.Close()
	testkit.Wait(t, canceled, "the request's context to be canceled after the client left")
}

// TestDetachedStreamInWatcher: a detached stream's connection stays in
// the hang-up watcher, under the stream: one registration, no goroutine
// of the stream's own reading the socket.
func TestDetachedStreamInWatcher(t *testing.T) {
	ss := startStreamServer(t)
	resp := ss.open(t)
	defer resp.Body.Close()
	ss.s.hangups.mu.Lock()
	watched := len(ss.s.hangups.streams)
	ss.s.hangups.mu.Unlock()
	if watched != 1 {
		t.Errorf("%d connections in the hang-up watcher, want 1 (the stream's)", watched)
	}
	_, streams := ss.s.Open()
	if streams != 1 {
		t.Fatalf("%d streams open, want 1", streams)
	}
	// One goroutine, the copy: running counts watchClient too.
	ss.s.mu.Lock()
	for st := range ss.s.streams {
		if n := st.running.Load(); n != 1 {
			t.Errorf("stream runs %d goroutines, want 1 (no watchClient with the watcher)", n)
		}
	}
	ss.s.mu.Unlock()
	resp.Body.Close()
	testkit.Wait(t, ss.canceled, "the request's context to end after the client left")
	testkit.Wait(t, ss.ended, "OnStreamEnd's function to run")
}
