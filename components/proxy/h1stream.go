package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// An HTTP/1.1 watch served by net/http holds, for as long as it is open,
// the connection's serve goroutine (its stack grown by the round trip and
// blocked in the reverse proxy's copy), net/http's background reader
// goroutine, a 4 KiB bufio.Reader and 4 KiB + 2 KiB of response writers,
// all waiting for the next event. h1Stream takes the connection over
// (http.Hijacker) once the upstream's headers are written, and leaves
// net/http's serve goroutine to return: a fresh goroutine copies the body
// as HTTP/1.1 chunks straight to the socket through a 512-byte buffer (a
// pooled 32 KiB one while a burst lasts), and the client leaving is
// noticed, as net/http's background reader did, by one goroutine for all
// streams (an epoll set asking for hang-ups, closewatch_linux.go) or,
// where that is not available, by a goroutine per stream reading the
// socket.
//
// The response says "Connection: close": the connection is not handed back
// to net/http at the end, so the client dials again for its next request
// (a loopback dial, once per watch).
//
// Everything that counted the request while the handler ran (the
// --max-long-running slot, fanout_downstream_inflight_requests,
// fanout_open_long_running_requests) is released at the stream's true end
// instead (after); the balancer's Done and the watch tracking already
// happen when the body is closed, which the copy goroutine does.
type h1Stream struct {
	// w is the long-running response writer (a flushWriter), used until
	// and unless the connection is taken over.
	w http.ResponseWriter
	h *Handler
	// cancel ends the upstream request. Its context is detached from the
	// net/http request's, which net/http cancels when the handler returns;
	// unfollow stops the net/http request's cancellation reaching cancel
	// (until the takeover, a client leaving ends the upstream request as
	// for any request).
	cancel   context.CancelFunc
	unfollow func() bool
	// values is the bottom of the request's context: net/http's context's
	// values without its cancellation, until the takeover; then none.
	values *detachedCtx
	// body is the upstream response body (set by the forwarder). Until
	// the takeover the reverse proxy reads it through the h1Stream; after
	// it, the copy goroutine owns it and the reverse proxy sees io.EOF.
	body io.ReadCloser

	conn net.Conn
	rb   [1]byte // watchClient's read buffer
	// running counts the stream's goroutines (copy, and watchClient
	// unless the Handler's hang-up watcher has the connection); the last
	// one out removes it from the Handler's set.
	running   atomic.Int32
	hangupKey // the stream's key in the Handler's hang-up watcher

	mu     sync.Mutex
	taken  bool     // the connection is ours
	ended  bool     // the copy goroutine has finished
	finals []func() // run at the end (after)

	// links keep it in the Handler's open streams (streamSet).
	links[h1Stream]
}

func (s *h1Stream) linksOf() *links[h1Stream] { return &s.links }

// newH1Stream returns a stream for a request that may be taken over, and
// the context the request is to carry: parent's values, parent's
// cancellation until the takeover, then only the stream's own.
func newH1Stream(parent context.Context) (*h1Stream, context.Context) {
	s := new(h1Stream)
	s.values = newDetachedCtx(parent)
	ctx, cancel := context.WithCancel(s.values)
	s.cancel = cancel
	s.unfollow = context.AfterFunc(parent, cancel)
	return s, ctx
}

// detachedCtx is context.WithoutCancel whose parent can be let go of.
// The request's context, which the upstream HTTP/2 stream keeps for as
// long as it is open, reaches net/http's through it; after the takeover
// nothing on the way up reads net/http's values (http.ServerContextKey,
// http.LocalAddrContextKey), and dropping them frees net/http's request
// and connection contexts with the watch still open.
type detachedCtx struct {
	parent atomic.Pointer[context.Context]
}

func newDetachedCtx(parent context.Context) *detachedCtx {
	d := new(detachedCtx)
	d.parent.Store(&parent)
	return d
}

// detach drops the parent: Value answers nil from now on.
func (d *detachedCtx) detach() { d.parent.Store(nil) }

func (*detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedCtx) Done() <-chan struct{}       { return nil }
func (*detachedCtx) Err() error                  { return nil }

func (d *detachedCtx) Value(key any) any {
	if p := d.parent.Load(); p != nil {
		return (*p).Value(key)
	}
	return nil
}

// mayTakeOver tells whether r's response may be taken over: a long-running
// GET over HTTP/1.1 (chunking needs 1.1) with no request body left to read
// from the connection. Upgrades have their own path (upgrade.go).
func mayTakeOver(r *http.Request, long, upgrade bool) bool {
	return long && !upgrade && r.Method == http.MethodGet &&
		r.ProtoMajor == 1 && r.ProtoMinor >= 1 && !hasBody(r)
}

// after runs f when the stream ends, or now if it was not taken over or
// has ended already.
func (s *h1Stream) after(f func()) {
	s.mu.Lock()
	if s.taken && !s.ended {
		s.finals = append(s.finals, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}

// handlerDone is called when the handler returns. A taken-over stream
// then lets go of net/http's ResponseWriter, which holds the connection's
// buffers (8 KiB) through net/http's conn.
func (s *h1Stream) handlerDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken {
		s.w = nil
	}
}

// Header, Write, WriteHeader, FlushError, Flush and Unwrap make the
// h1Stream the ResponseWriter the reverse proxy writes to.

func (s *h1Stream) Header() http.Header { return s.w.Header() }

func (s *h1Stream) Write(p []byte) (int, error) {
	if s.taken { // only the handler's goroutine writes, and it took over
		return 0, http.ErrHijacked
	}
	return s.w.Write(p)
}

// WriteHeader takes the connection over for a streamed answer of the
// forwarder's (a body, no length, no trailers); any other answer, and any
// error fanout writes itself, goes through net/http as usual.
func (s *h1Stream) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hdr := s.w.Header()
	if s.taken || s.body == nil || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified ||
		hdr.Get("Content-Length") != "" || hdr.Get("Trailer") != "" {
		s.w.WriteHeader(code)
		return
	}
	hdr.Set("Connection", "close")
	s.w.WriteHeader(code)
	// Hijack writes the headers (chunked: no length, HTTP/1.1, handler
	// still running) and gives the connection up.
	conn, brw, err := http.NewResponseController(s.w).Hijack()
	if err != nil {
		return // not hijackable after all: net/http serves it, and closes the connection after
	}
	// A client does not send the next request before this response ends;
	// one that did gets the connection closed, as "Connection: close" said.
	_, _ = brw.Reader.Discard(brw.Reader.Buffered())
	s.unfollow()
	s.unfollow = nil
	s.values.detach()
	s.conn, s.taken = conn, true
	// The client closing the connection must end the upstream request:
	// one goroutine watches all connections for that where it can
	// (Linux), else a goroutine per stream reads its connection.
	watched := s.h.hangups.watch(s)
	s.running.Store(2)
	if watched {
		s.running.Store(1)
	}
	s.h.streams.add(s)
	go s.copy()
	if !watched {
		go s.watchClient()
	}
}

// FlushError is what http.ResponseController calls (the reverse proxy's
// flush timer).
func (s *h1Stream) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken {
		return nil // the copy goroutine writes each chunk as it comes
	}
	return http.NewResponseController(s.w).Flush()
}

// Flush implements http.Flusher.
func (s *h1Stream) Flush() { _ = s.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (s *h1Stream) Unwrap() http.ResponseWriter { return s.w }

// Read and Close make the h1Stream the body the reverse proxy copies: the
// upstream body until the takeover, then an empty one, so that the
// reverse proxy returns and with it net/http's serve goroutine. Both run
// on the handler's goroutine, as WriteHeader does.

func (s *h1Stream) Read(p []byte) (int, error) {
	if s.taken {
		return 0, io.EOF
	}
	return s.body.Read(p)
}

func (s *h1Stream) Close() error {
	if s.taken {
		return nil
	}
	return s.body.Close()
}

// chunkHead is the room left before the data for a chunk's size line:
// up to 3 hex digits for 512 bytes (up to 4 KiB), and CRLF. A stream's buffer is
// longCopyBuffer in all (an allocation size class of its own), its
// chunks at most chunkData long.
const (
	chunkHead = 8
	chunkData = longCopyBuffer - chunkHead - 2
)

var lastChunk = []byte("0\r\n\r\n")

// copy is the stream's goroutine: upstream body to client, one chunk and
// one write per read. It ends the
// stream: at the upstream's end (a clean end of the chunked body, as
// StopLongRunning and the rebalancer make it), at a read error (the
// connection is closed without the last chunk, as net/http's
// ErrAbortHandler does, so the client sees a broken stream), or when
// the client is gone.
func (s *h1Stream) copy() {
	defer s.exit()
	small := make([]byte, longCopyBuffer)
	buf := small
	defer func() {
		if len(buf) != len(small) {
			copyBuffers.Put(buf)
		}
	}()
	for {
		n, err := s.body.Read(buf[chunkHead : len(buf)-2])
		if n > 0 {
			if _, werr := s.conn.Write(chunk(buf, n)); werr != nil {
				break // the client is gone
			}
		}
		// A read that filled the buffer says more was probably waiting
		// (a burst: the initial events of a watch-list, a busy
		// informer): read it in 32 KiB chunks, one write each, rather
		// than 512-byte ones. The first read that does not fill the large
		// buffer gives it back, so an idle watch waits with the small one
		// (unless a burst ended exactly at a 32 KiB read).
		switch full := n == len(buf)-chunkHead-2; {
		case full && len(buf) == len(small):
			buf = copyBuffers.Get()
		case !full && len(buf) != len(small):
			copyBuffers.Put(buf)
			buf = small
		}
		if errors.Is(err, io.EOF) {
			_, _ = s.conn.Write(lastChunk)
			break
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				s.h.proxy.ErrorLog.Printf("fanout: reading a long-running response from kube-apiserver failed, closing the client's connection: %v", err)
			}
			break
		}
	}
	s.h.hangups.forget(s)
	_ = s.conn.Close()
	s.cancel()
	_ = s.body.Close()
	s.mu.Lock()
	s.ended = true
	finals := s.finals
	s.finals = nil
	s.mu.Unlock()
	for _, f := range finals {
		f()
	}
}

// hangup is the hang-up watcher's word that the client left: the copy
// goroutine then ends the stream.
func (s *h1Stream) hangup() { s.cancel() }

func (s *h1Stream) exit() {
	if s.running.Add(-1) == 0 {
		s.h.streams.remove(s)
	}
}

// chunk frames the n bytes at buf[chunkHead:] as one HTTP/1.1 chunk, in
// place: the size line before them, CRLF after.
func chunk(buf []byte, n int) []byte {
	const hex = "0123456789abcdef"
	i := chunkHead - 2
	buf[i], buf[i+1] = '\r', '\n'
	for v := n; ; v >>= 4 {
		i--
		buf[i] = hex[v&0xf]
		if v < 16 {
			break
		}
	}
	end := chunkHead + n
	buf[end], buf[end+1] = '\r', '\n'
	return buf[i : end+2]
}

// watchClient reads the connection until the client closes it (or the
// copy goroutine does), then ends the upstream request. The client sends
// nothing more on it: anything it does send is dropped. It is the
// fallback of the Handler's hang-up watcher (closewatch_linux.go).
func (s *h1Stream) watchClient() {
	defer s.exit()
	for {
		if _, err := s.conn.Read(s.rb[:]); err != nil {
			s.cancel()
			return
		}
	}
}

// streamSet is the Handler's open taken-over streams, so that the
// Server's Stop can wait for them: net/http's Shutdown forgets a
// connection once it is hijacked.
type streamSet struct {
	mu    sync.Mutex
	list  ilist[h1Stream, *h1Stream]
	empty chan struct{} // closed when the list empties, made by a waiter
}

func (ss *streamSet) add(s *h1Stream) {
	ss.mu.Lock()
	ss.list.push(s)
	ss.mu.Unlock()
}

func (ss *streamSet) remove(s *h1Stream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.list.remove(s) && ss.list.len() == 0 && ss.empty != nil {
		close(ss.empty)
		ss.empty = nil
	}
}

// WaitLongRunning ends the long-running responses whose connections were
// taken over (StopLongRunning, if it has not run yet) and waits until
// they have ended; if ctx ends first, it closes their connections, waits
// for their goroutines and returns ctx's error. Server.Stop calls it after
// Shutdown, which does not wait for them.
func (h *Handler) WaitLongRunning(ctx context.Context) error {
	h.StopLongRunning()
	defer h.hangups.stop()
	ss := &h.streams
	ss.mu.Lock()
	if ss.list.len() == 0 {
		ss.mu.Unlock()
		return nil
	}
	if ss.empty == nil {
		ss.empty = make(chan struct{})
	}
	empty := ss.empty
	ss.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
	}
	ss.mu.Lock()
	for s := range ss.list.all() {
		_ = s.conn.Close()
		s.cancel()
	}
	ss.mu.Unlock()
	<-empty
	return ctx.Err()
}
