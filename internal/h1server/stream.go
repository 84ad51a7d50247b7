package h1server

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

// A long-running answer (a watch, logs that follow) served like any other
// holds, for as long as it is open, the connection's goroutine (its stack
// grown by the handler) and the connection's 8 KiB of buffers, all
// waiting for the next event. Detach lets the handler give such an answer
// to the server: the header goes out at once, chunked, with
// "Connection: close"; the handler returns, and with it the connection's
// goroutine and buffers; a fresh goroutine copies the body to the socket
// as one chunk per read, through a 512-byte buffer (a pooled 32 KiB one
// while a burst lasts). The connection is not reused: the client dials
// again for its next request (a loopback dial, once per watch).
//
// The request's context stays live until the stream ends; the client
// hanging up cancels it (the hang-up watcher, or where that is not
// available a goroutine per stream reading the socket), so whatever the
// handler started for the body under that context ends with the client.
// Shutdown waits for the streams, Close cuts them.

// streamBuffer is what a stream holds while it waits: an event of up to
// 502 bytes goes out in one chunk and one write.
const streamBuffer = 1 << 9

// burstBuffer is what a stream reads with once a read filled its small
// buffer: more was probably waiting.
const burstBuffer = 32 << 10

// chunkHead is the room left before the data for a chunk's size line: up
// to 4 hex digits for a burst buffer, and CRLF; the CRLF after the data
// takes 2 more.
const chunkHead = 8

var (
	lastChunk    = []byte("0\r\n\r\n")
	burstBuffers = sync.Pool{New: func() any { return new([burstBuffer]byte) }}
)

// Detach hands the rest of w's response to the server: it writes the
// status code and w's header now, chunked and with "Connection: close",
// and once the handler returns, a goroutine of the server's copies body to
// the client, one chunk per Read, and closes the connection at its end:
// after the last chunk at io.EOF, without it at any other error (the
// client sees a broken answer). The body is closed at the end. Nothing
// may be written to w after a Detach that succeeded (Write fails with
// http.ErrHijacked, Flush does nothing).
//
// It says false, and does nothing, where it cannot: w is not (and does not
// Unwrap to) a ResponseWriter of this package, the request is not
// HTTP/1.1, has a body or is a HEAD, the header was written, the status
// has no body or is informational, or the header declares a length,
// trailers or a transfer coding. The caller then writes the answer itself.
func Detach(w http.ResponseWriter, code int, body io.ReadCloser) bool {
	r := responseOf(w)
	return r != nil && r.detach(code, body)
}

// OnStreamEnd runs f once the stream of w's detached response has ended
// (its connection closed, its body closed), and says true; called after
// that end, it runs f at once. It says false and does not run f when w's
// response was not detached: the response then ends with its handler.
// A handler's middleware uses it to hold what it counted (a slot, a
// gauge) until the answer's true end.
func OnStreamEnd(w http.ResponseWriter, f func()) bool {
	r := responseOf(w)
	if r == nil || r.stream == nil {
		return false
	}
	r.stream.after(f)
	return true
}

// Detached reports whether w's response was detached (Detach), so that a
// middleware builds the function it gives OnStreamEnd only then.
func Detached(w http.ResponseWriter) bool {
	r := responseOf(w)
	return r != nil && r.stream != nil
}

// responseOf finds the response under w's wrappers, as
// http.ResponseController does.
func responseOf(w http.ResponseWriter) *response {
	for {
		switch t := w.(type) {
		case *response:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

func (w *response) detach(code int, body io.ReadCloser) bool {
	h := w.header
	if w.hijacked || w.wroteHeader || w.stream != nil || w.body != nil || w.isHead || !w.req.ProtoAtLeast(1, 1) ||
		code < 200 || !bodyAllowedForStatus(code) || has(h, "Content-Length") || has(h, "Trailer") || has(h, "Transfer-Encoding") {
		return false
	}
	h.Del("Connection")
	h["Connection"] = []string{"close"}
	w.WriteHeader(code)
	w.writeHeader(nil) // chunked: HTTP/1.1, no length, handler running
	// A failed flush is the client gone: the stream's first write says so.
	_ = w.c.bw.Flush()
	w.stream = &stream{body: body}
	return true
}

// stream is a detached response being copied.
type stream struct {
	srv    *Server
	conn   net.Conn
	body   io.ReadCloser
	cancel context.CancelFunc // the request's context
	token  int32              // the connection's key in the hang-up watcher
	// running counts the stream's goroutines (copy, and watchClient
	// unless the hang-up watcher has the connection); the last one out
	// removes the stream from the server's.
	running atomic.Int32
	rb      [1]byte // watchClient's read buffer

	mu     sync.Mutex
	ended  bool
	finals []func() // OnStreamEnd's
}

// startStream hands c's connection to st, which the handler detached.
// ok false: the handler panicked after detaching, and the stream ends at
// once, without its last chunk.
func (c *conn) startStream(st *stream, cancel context.CancelFunc, ok bool) {
	s := c.srv
	st.srv, st.conn, st.cancel, st.token = s, c.rwc, cancel, c.token
	if c.deadline.Load() {
		c.setReadDeadline(time.Time{})
	}
	// Tracked before the connection is untracked: Shutdown never sees
	// neither.
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	st.running.Store(1)
	if !ok {
		if c.watched {
			s.hangups.drop(c.token)
		}
		st.end()
		st.exit()
		return
	}
	watched := c.watched && s.hangups.retarget(c.token, st)
	if !watched {
		st.running.Store(2)
	}
	go st.copy()
	if !watched {
		go st.watchClient()
	}
}

// after runs f when the stream ends, or now if it has.
func (st *stream) after(f func()) {
	st.mu.Lock()
	if !st.ended {
		st.finals = append(st.finals, f)
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	f()
}

// copy is the stream's goroutine: body to client, one chunk and one write
// per read, until the body ends, fails, or the client is gone.
func (st *stream) copy() {
	defer st.exit()
	small := make([]byte, streamBuffer)
	buf := small
	var burst *[burstBuffer]byte
	defer func() {
		if burst != nil {
			burstBuffers.Put(burst)
		}
	}()
	for {
		n, err := st.body.Read(buf[chunkHead : len(buf)-2])
		if n > 0 {
			if _, werr := st.conn.Write(chunk(buf, n)); werr != nil {
				break // the client is gone
			}
		}
		// A read that filled the buffer says more was probably waiting
		// (a burst: the initial events of a watch-list, a busy
		// informer): read it in 32 KiB chunks, one write each. The
		// first read that does not fill the large buffer gives it back,
		// so an idle stream waits with the small one.
		switch full := n == len(buf)-chunkHead-2; {
		case full && burst == nil:
			burst = burstBuffers.Get().(*[burstBuffer]byte)
			buf = burst[:]
		case !full && burst != nil:
			burstBuffers.Put(burst)
			burst, buf = nil, small
		}
		if errors.Is(err, io.EOF) {
			_, _ = st.conn.Write(lastChunk)
			break
		}
		if err != nil {
			break
		}
	}
	st.srv.hangups.drop(st.token)
	st.end()
}

// end closes the connection, the request's context and the body, then
// runs the finals.
func (st *stream) end() {
	_ = st.conn.Close()
	st.cancel()
	_ = st.body.Close()
	st.mu.Lock()
	st.ended = true
	finals := st.finals
	st.finals = nil
	st.mu.Unlock()
	for _, f := range finals {
		f()
	}
}

// hangup is the hang-up watcher's word that the client left: the body's
// reader, under the request's context, ends and with it the copy.
func (st *stream) hangup() { st.cancel() }

// abort is Close's: the connection is closed and the request canceled.
func (st *stream) abort() {
	_ = st.conn.Close()
	st.cancel()
}

func (st *stream) exit() {
	if st.running.Add(-1) == 0 {
		st.srv.mu.Lock()
		delete(st.srv.streams, st)
		st.srv.mu.Unlock()
	}
}

// watchClient reads the connection until the client closes it (or copy
// does), then cancels the request. The client sends nothing more on it:
// anything it does send is dropped.
func (st *stream) watchClient() {
	defer st.exit()
	for {
		if _, err := st.conn.Read(st.rb[:]); err != nil {
			st.cancel()
			return
		}
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
