//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; this client uses only its Framer and error types, which net/http does not export.

package h2conn

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"

	"golang.org/x/net/http2"
)

// Bodies: the answer's, read from what the reading goroutine buffered
// within the stream window, and the request's, written by a goroutine of
// its own within the server's windows.

// onceCloser is a request body that may be closed from both the writer
// and the stream's end.
type onceCloser struct {
	io.ReadCloser
	once sync.Once
}

func (c *onceCloser) Close() error {
	c.once.Do(func() { c.ReadCloser.Close() })
	return nil
}

// errBodyClosed is what a Read after Close returns.
var errBodyClosed = errors.New("fanout HTTP/2 client: response body closed")

// responseBody is a response body: it reads the data the stream holds and
// gives the window back as it goes.
type responseBody struct {
	s      *stream
	closed bool // guarded by the connection's mu
}

func (b *responseBody) Read(p []byte) (int, error) {
	s := b.s
	cc := s.cc
	cc.mu.Lock()
	for s.off == len(s.buf) && !s.ended && s.err == nil && !b.closed {
		s.waited = true
		s.cond.Wait()
	}
	if b.closed {
		cc.mu.Unlock()
		return 0, errBodyClosed
	}
	if s.off == len(s.buf) {
		err := s.err
		if err == nil {
			err = io.EOF
			if s.trailer != nil {
				s.publishTrailerLocked()
			}
		}
		cc.mu.Unlock()
		return 0, err
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	var sInc uint32
	if !s.ended && s.err == nil {
		s.unacked += n
		if s.unacked >= s.size/2 {
			inc := cc.resizeLocked(s, s.unacked)
			sInc = uint32(inc)
			s.window += inc
			s.unacked = 0
		}
	}
	if s.off == len(s.buf) {
		s.off = 0
		if cap(s.buf) > min(64<<10, s.size) {
			s.buf = nil // a burst is over; do not keep its buffer
		} else {
			s.buf = s.buf[:0]
		}
	}
	cc.settleLocked(s)
	cc.connUnacked += n
	cInc := cc.takeConnUpdateLocked()
	cc.mu.Unlock()
	cc.writeWindowUpdates(s.id, sInc, cInc)
	return n, nil
}

// publishTrailerLocked hands the trailer received to the response, at
// its body's end as net/http does. A function of its own, so that its map
// iterator is not in Read's frame, below which a watch's goroutine waits
// for its life (cmd/fanout's TestFootprintPerWatch).
//
//go:noinline
func (s *stream) publishTrailerLocked() {
	if s.res.Trailer == nil {
		s.res.Trailer = make(http.Header, len(s.trailer))
	}
	maps.Copy(s.res.Trailer, s.trailer)
	s.trailer = nil
}

func (b *responseBody) Close() error {
	s := b.s
	cc := s.cc
	cc.mu.Lock()
	if b.closed {
		cc.mu.Unlock()
		return nil
	}
	b.closed = true
	open := cc.streams[s.id] == s
	if !open {
		// Ended: what was not read goes back to the connection window.
		cc.connUnacked += len(s.buf) - s.off
		s.buf, s.off = nil, 0
		cc.settleLocked(s)
		inc := cc.takeConnUpdateLocked()
		s.cond.Broadcast()
		cc.mu.Unlock()
		cc.writeWindowUpdates(0, 0, inc)
		return nil
	}
	cc.mu.Unlock()
	cc.reset(s, http2.ErrCodeCancel, errBodyClosed)
	// The stream is gone from the connection, so data arriving from now
	// on goes back to the connection window as it comes; what it holds
	// goes back now.
	cc.mu.Lock()
	cc.connUnacked += len(s.buf) - s.off
	s.buf, s.off = nil, 0
	cc.settleLocked(s)
	inc := cc.takeConnUpdateLocked()
	cc.mu.Unlock()
	cc.writeWindowUpdates(0, 0, inc)
	return nil
}

// gzipBody decompresses a body fanout asked gzip for on the client's
// behalf.
type gzipBody struct {
	body io.ReadCloser
	zr   *gzip.Reader
	err  error
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.body)
		if err != nil {
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		g.err = err
	}
	return n, err
}

func (g *gzipBody) Close() error { return g.body.Close() }

// bodyBufs are the chunks request bodies are read into.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// writeBody sends a request body in DATA frames as the server's windows
// allow, and ends the stream after it. It stops when the stream ends
// first (an answer, a reset, the connection lost) and resets the stream
// if the body cannot be read.
func (cc *Conn) writeBody(s *stream, body *onceCloser) {
	defer func() {
		// Done with it: the stream's end need not close it for us.
		cc.mu.Lock()
		if s.body == body {
			s.body = nil
		}
		cc.mu.Unlock()
		body.Close()
	}()
	bp := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		data := buf[:n]
		eof := rerr == io.EOF
		if rerr != nil && !eof {
			cc.reset(s, http2.ErrCodeCancel, fmt.Errorf("reading the request body: %w", rerr))
			return
		}
		for first := true; len(data) > 0 || (eof && first); first = false {
			cc.mu.Lock()
			for len(data) > 0 && (s.sendWindow <= 0 || cc.sendWindow <= 0) && cc.streams[s.id] == s && cc.err == nil {
				cc.sendCond.Wait()
			}
			if cc.streams[s.id] != s || cc.err != nil {
				// The stream ended from the server's side (or was reset):
				// nothing more is wanted.
				answered := s.res != nil && s.ended && s.err == nil
				cc.mu.Unlock()
				if answered {
					// The server answered in full before the body
					// ended: tell it that the rest will not come.
					cc.writeRST(s.id, http2.ErrCodeCancel)
				}
				return
			}
			k := 0
			if len(data) > 0 {
				k = min(len(data), s.sendWindow, cc.sendWindow, int(cc.maxFrame))
			}
			s.sendWindow -= k
			cc.sendWindow -= k
			cc.mu.Unlock()
			end := eof && k == len(data)
			if err := cc.write(func(fr *http2.Framer) error { return fr.WriteData(s.id, end, data[:k]) }); err != nil {
				return
			}
			data = data[k:]
			if end {
				return
			}
		}
	}
}
