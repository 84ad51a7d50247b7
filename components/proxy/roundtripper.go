package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// ErrStopped is returned by the RoundTripper for requests made after
// StopLongRunning: the library that owns the Handler was closed.
var ErrStopped = errors.New("fanout: the balancing transport is closed; build a new one (client.Wrap) or use the original rest.Config")

// RoundTripper returns the Handler as an http.RoundTripper, for programs
// that link fanout instead of running the sidecar (package client).
//
// A request takes the sidecar's path minus the loopback hop and the
// reverse proxy: it is classified once (reqinfo.New), handed
// to the same forwarder (pick, send, retry elsewhere when unprocessed),
// and its response body reports Done to the balancer when it ends;
// StopLongRunning ends open watches cleanly. Failures come back as the
// Status responses the sidecar would write (503 with Retry-After when no
// endpoint is known, 502, 504), so client-go retries and reports them as
// it does through the sidecar; only a request whose own context ended
// gets an error, as does every request after StopLongRunning (ErrStopped).
// Upgrade requests (exec, attach, port-forward) get 501, as in the
// sidecar.
//
// The request's URL host and Host header are ignored: each attempt goes
// to the picked endpoint. The RoundTripper closes the request body, as
// http.RoundTripper requires. It is safe for concurrent use.
func (h *Handler) RoundTripper() http.RoundTripper { return (*roundTripper)(h) }

type roundTripper Handler

var _ http.RoundTripper = (*roundTripper)(nil)

func (rt *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	h := (*Handler)(rt)
	start := time.Now()
	info := reqinfo.New(r)
	kind := classify(info).Kind
	if h.stopping.Load() {
		closeRequestBody(r)
		return nil, ErrStopped
	}
	if info.Upgrade || info.H2COffer {
		closeRequestBody(r)
		h.metrics.answered(kind, http.StatusNotImplemented, "", time.Since(start))
		return statusResponse(r, http.StatusNotImplemented, statusReasonUnknown,
			"upgrade requests (exec/attach/port-forward) are not supported by fanout's balancing transport; use a rest.Config that talks to the apiserver directly for them"), nil
	}
	// The request ends (its one End, end.go) on error now, else when the
	// response body ends, and gives back what it held as a request
	// ServeHTTP served does: the cost table hears of its end too (a
	// watch's row was opened when it was answered, and stayed open).
	ctx, req := reqinfo.WithRequest(r.Context(), info, start)
	req.OnEnd((*callerBody)(r))
	st := h.newState(req)
	work := endCost | endLog
	if kind == balancer.Long {
		h.metrics.openLong.Inc()
		work |= endOpenLong
	}
	st.reportAtEnd(r, work)
	out := r.WithContext(ctx) // a shallow copy; r stays untouched
	u := *r.URL
	// The reverse proxy's Rewrite does the same: the forwarder sets the
	// host per attempt, and an empty Host lets :authority follow it.
	u.Scheme, u.Host = "https", ""
	out.URL, out.Host = &u, ""
	if kind == balancer.Long {
		// The watch hook edits the headers it sends (Accept-Encoding);
		// a RoundTripper must not modify the caller's request.
		out.Header = r.Header.Clone()
	}
	if out.Body != nil && out.Body != http.NoBody && out.ContentLength == 0 {
		// For an outgoing request, 0 with a body means "unknown"; the
		// forwarder reads it as "empty" (a server request says -1).
		out.ContentLength = -1
	}

	resp, err := (*forwarder)(h).RoundTrip(out)
	if err != nil {
		code, reason, msg := describeError(ctx, err)
		st.outcome.Code = code
		req.End()
		h.metrics.answered(kind, code, st.endpoint, time.Since(start))
		if code == statusClientClosedRequest {
			return nil, fmt.Errorf("%s: %w", msg, context.Cause(r.Context()))
		}
		resp := statusResponse(r, code, reason, msg)
		if h.endpointHeader {
			setEndpointHeaders(resp.Header, st)
		}
		return resp, nil
	}
	resp.Body = &finishBody{ReadCloser: resp.Body, req: req}
	resp.Request = r
	return resp, nil
}

// finishBody ends the request (its one End, which runs once) at the first
// read error (io.EOF included) or at Close. The forwarder's doneBody inside
// it reports to the balancer.
type finishBody struct {
	io.ReadCloser
	req *reqinfo.Request
}

func (b *finishBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.req.End()
	}
	return n, err
}

func (b *finishBody) Close() error {
	err := b.ReadCloser.Close()
	b.req.End()
	return err
}

func closeRequestBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// statusResponse is the response writeStatus (internal/kstatus) would send, as the client
// receives it.
func statusResponse(r *http.Request, code int, reason statusReason, msg string) *http.Response {
	rec := &recorder{header: http.Header{}}
	writeStatus(rec, code, reason, msg)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", rec.code, http.StatusText(rec.code)),
		StatusCode:    rec.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()),
		Request:       r,
	}
}

// recorder is the minimal ResponseWriter writeStatus needs.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}
