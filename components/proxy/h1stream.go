package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/fanout-dev/fanout/internal/h1server"
)

// h1Stream lets the server stream an HTTP/1.1 long-running answer by
// itself (h1server.Detach): once the upstream's headers are in, the
// handler returns and a small goroutine of the server's copies the body
// to the client as chunks, instead of the handler's goroutine (its stack
// grown by the round trip and blocked in the reverse proxy's copy) and the
// connection's buffers waiting for each event. The answer says
// "Connection: close". The client hanging up ends the request's context,
// which the upstream request carries, and with it the stream.
//
// Everything that counted the request while the handler ran (the
// --max-long-running slot, fanout_downstream_inflight_requests,
// fanout_open_long_running_requests, the cost row) is released at the
// stream's true end instead: the request's one end (reqinfo.Request.End),
// which whoever made the request (the listener's edge) runs then (end.go);
// the balancer's Done and the watch tracking already happen when the body
// is closed, which the server does at the end.
type h1Stream struct {
	// w is the long-running response writer (a flushWriter), used unless
	// the answer is detached; dropped when the handler returns.
	w http.ResponseWriter
	h *Handler
	// body is the upstream response body (set by the forwarder). Until
	// the detach the reverse proxy reads it through the h1Stream; after
	// it, the server owns it (as streamBody) and the reverse proxy sees
	// io.EOF.
	body  io.ReadCloser
	taken bool
}

// mayTakeOver tells whether r's response may be detached: a long-running
// GET over HTTP/1.1 (chunking needs 1.1) with no request body. Upgrades
// have their own path (upgrade.go).
func mayTakeOver(r *http.Request, long, upgrade bool) bool {
	return long && !upgrade && r.Method == http.MethodGet &&
		r.ProtoMajor == 1 && r.ProtoMinor >= 1 && !hasBody(r)
}

// handlerDone is called when the handler returns: a detached stream lets
// go of the ResponseWriter, which holds the connection's buffers.
func (s *h1Stream) handlerDone() {
	if s.taken {
		s.w = nil
	}
}

// Header, Write, WriteHeader, FlushError, Flush and Unwrap make the
// h1Stream the ResponseWriter the reverse proxy writes to. They all run on
// the handler's goroutine.

func (s *h1Stream) Header() http.Header { return s.w.Header() }

func (s *h1Stream) Write(p []byte) (int, error) {
	if s.taken {
		return 0, http.ErrHijacked
	}
	return s.w.Write(p)
}

// WriteHeader detaches a streamed answer of the forwarder's (a body, no
// length, no trailers: h1server.Detach checks); any other answer, any
// error fanout writes itself, and any server that cannot detach gets the
// usual path.
func (s *h1Stream) WriteHeader(code int) {
	if s.taken || s.body == nil || !h1server.Detach(s.w, code, (*streamBody)(s)) {
		s.w.WriteHeader(code)
		return
	}
	s.taken = true
}

// FlushError is what http.ResponseController calls (the reverse proxy's
// flush timer).
func (s *h1Stream) FlushError() error {
	if s.taken {
		return nil // the server writes each chunk as it comes
	}
	return http.NewResponseController(s.w).Flush()
}

// Flush implements http.Flusher.
func (s *h1Stream) Flush() { _ = s.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (s *h1Stream) Unwrap() http.ResponseWriter { return s.w }

// Read and Close make the h1Stream the body the reverse proxy copies: the
// upstream body until the detach, then an empty one, so that the reverse
// proxy returns and with it the handler.

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

// streamBody is the upstream body as the server's stream reads it: a
// failed read is logged as the reverse proxy logs a broken stream.
type streamBody h1Stream

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
		b.h.proxy.ErrorLog.Printf("fanout: reading a long-running response from kube-apiserver failed, closing the client's connection: %v", err)
	}
	return n, err
}

func (b *streamBody) Close() error { return b.body.Close() }

func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}
