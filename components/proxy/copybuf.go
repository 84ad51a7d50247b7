package proxy

import (
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/fanout-dev/fanout/internal/budget"
)

// A long-running response (a watch) holds the reverse proxy's copy buffer
// for as long as it is open, and spends almost all of that time blocked in
// the upstream Read with the buffer empty. So long-running responses get a
// small buffer (longCopyBuffer), and flushWriter keeps the writes of a
// burst together: a Read that filled the whole buffer says that more data
// was probably waiting, so its Write is not flushed; the first short Read
// (the upstream had nothing more buffered) flushes everything. net/http's
// own response buffers then cut the burst into chunks as an 8 KiB copy
// buffer would have, with no extra flush per KiB.
//
// A burst that ends exactly at a buffer boundary would leave its last
// bytes unflushed until more data came; a timer flushes them after
// burstFlushDelay instead.
const (
	// 512 bytes: what a watch holds while it waits. An event of up to
	// 502 bytes (a small object in protobuf, a short JSON one) still goes
	// out in one write; a larger one costs one more, as the first Read
	// fills the buffer (over HTTP/1.1 detached: a 502-byte chunk, then
	// the rest from a 32 KiB buffer, internal/h1server). With 1 KiB that was so
	// from 1,014 bytes on; 2,000 watches hold 1 MiB less.
	longCopyBuffer  = 1 << 9
	burstFlushDelay = time.Millisecond
)

// flushWriter is the ResponseWriter the reverse proxy writes a
// long-running response to. The reverse proxy calls Write and Flush from
// the request's goroutine and, once, Flush from a timer of its own; the
// burst timer calls flushNow from another. mu serialises them all, and no
// call reaches the ResponseWriter after stop.
type flushWriter struct {
	http.ResponseWriter
	size int // the copy buffer's size: a Write this long was a full Read
	// delay is burstFlushDelay; a test that must not see the timer fire
	// in the middle of its burst sets it longer.
	delay time.Duration

	mu      sync.Mutex
	held    bool // the last Write filled the buffer: its Flush waits
	pending bool // a Flush was held back
	stopped bool
	timer   *time.Timer
}

func newFlushWriter(w http.ResponseWriter, size int) *flushWriter {
	return &flushWriter{ResponseWriter: w, size: size, delay: burstFlushDelay}
}

func (f *flushWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return 0, http.ErrHandlerTimeout
	}
	f.held = len(p) >= f.size
	return f.ResponseWriter.Write(p)
}

func (f *flushWriter) WriteHeader(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.ResponseWriter.WriteHeader(code)
	}
}

// FlushError is what http.ResponseController calls (the reverse proxy
// flushes through one).
func (f *flushWriter) FlushError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil
	}
	if f.held {
		f.held, f.pending = false, true
		if f.timer == nil {
			f.timer = time.AfterFunc(f.delay, f.flushNow)
		} else {
			f.timer.Reset(f.delay)
		}
		return nil
	}
	return f.flushLocked()
}

// Flush implements http.Flusher.
func (f *flushWriter) Flush() { _ = f.FlushError() }

func (f *flushWriter) flushNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped && f.pending {
		_ = f.flushLocked()
	}
}

func (f *flushWriter) flushLocked() error {
	f.pending = false
	return http.NewResponseController(f.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (f *flushWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// stop is called when the handler is done with the response: whatever is
// held back goes out with the end of the response, which net/http writes.
func (f *flushWriter) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.timer != nil {
		f.timer.Stop()
	}
}

// The reverse proxy's copy buffers. A short answer is copied with a 32 KiB
// buffer taken from the answer budget (Config.AnswerBudget), or with a
// 2 KiB one when the budget is spent: a client that stops reading holds
// its copy buffer for as long as it does not read, so 1,000 of them held
// 31.25 MiB, per item only (docs/security.md, "The sum of the memory
// bounds"). longCopyBuffers are small, for long-running responses: a
// watch holds its buffer while it is open (at 2,000 watches, 32 KiB each
// would be 62.5 MiB), and its writes are kept together by a flushWriter
// (copybuf.go).
const (
	copyBuffer      = 32 << 10
	smallCopyBuffer = 2 << 10
)

var longCopyBuffers httputil.BufferPool = &bufferPool{size: longCopyBuffer}

// answerBuffers hands out the short answers' copy buffers: copyBuffer
// bytes while the budget grants them, smallCopyBuffer bytes beyond it.
// Every buffer comes back through Put (the reverse proxy defers it), which
// gives its bytes back to the budget.
type answerBuffers struct {
	budget       *budget.Bytes // nil: every copy gets copyBuffer bytes
	large, small bufferPool
}

func newAnswerBuffers(b *budget.Bytes) *answerBuffers {
	return &answerBuffers{budget: b, large: bufferPool{size: copyBuffer}, small: bufferPool{size: smallCopyBuffer}}
}

func (a *answerBuffers) Get() []byte {
	if a.budget == nil || a.budget.Take(copyBuffer) {
		return a.large.Get()
	}
	return a.small.Get()
}

func (a *answerBuffers) Put(buf []byte) {
	if cap(buf) < copyBuffer {
		a.small.Put(buf)
		return
	}
	if a.budget != nil {
		a.budget.Give(copyBuffer)
	}
	a.large.Put(buf)
}
