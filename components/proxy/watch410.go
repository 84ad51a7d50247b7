package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fanout-dev/fanout/components/balancer"
)

// A young apiserver's watch cache starts at the resourceVersion it had when
// it started, so it answers a watch from an older resourceVersion with
// 410 Gone, as the first event of a 200 stream; the reflector then re-lists,
// which is the flood fanout exists to prevent. An apiserver that has run
// longer usually still holds that history. So, before passing such a 410
// on, the proxy retries the watch once on the endpoint that has been usable
// longest (balancer.PickInfo.Oldest); if that one says 410 too, the client
// gets it.
//
// JSON (one event per line) and protobuf (length-prefixed frames) watch
// streams are inspected; CBOR streams pass through as they come.

// reasonGone counts, in fanout_retries_total, watches moved after a 410.
const reasonGone = "gone"

// maxFirstEvent bounds the first event read to look for a 410; a Status is
// far smaller, and a larger first event is an object, passed on as is.
const maxFirstEvent = 64 << 10

// goneCandidate reports whether out is a watch from a resourceVersion that
// a young apiserver may not have, answered in a framing whose first event
// the proxy can read (JSON or protobuf), and which.
func goneCandidate(out *http.Request, resp *http.Response) (framing, bool) {
	if resp.StatusCode != http.StatusOK {
		return framingNone, false
	}
	f := framingOf(resp.Header.Get("Content-Type"))
	if f != framingJSON && f != framingProtobuf {
		return framingNone, false
	}
	q := out.URL.Query()
	switch q.Get("watch") {
	case "1", "true":
	default:
		if !strings.Contains(out.URL.Path, "/watch/") {
			return framingNone, false
		}
	}
	rv := q.Get("resourceVersion")
	return f, rv != "" && rv != "0"
}

// isGoneEvent reports whether line is a watch ERROR event carrying a 410.
func isGoneEvent(line []byte) bool {
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Kind string `json:"kind"`
			Code int    `json:"code"`
		} `json:"object"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return false
	}
	return ev.Type == "ERROR" && ev.Object.Kind == "Status" && ev.Object.Code == http.StatusGone
}

// isGoneProtobufEvent reports whether ev, one length-prefixed frame of a
// protobuf watch without its prefix, is an ERROR event carrying a 410: a
// metav1.WatchEvent whose object is "k8s\x00" and a runtime.Unknown
// holding a metav1.Status.
func isGoneProtobufEvent(ev []byte) bool {
	var we metav1.WatchEvent
	if we.Unmarshal(ev) != nil || we.Type != "ERROR" {
		return false
	}
	raw, ok := bytes.CutPrefix(we.Object.Raw, []byte("k8s\x00"))
	if !ok {
		return false
	}
	var u runtime.Unknown
	if u.Unmarshal(raw) != nil || u.Kind != "Status" {
		return false
	}
	var st metav1.Status
	return st.Unmarshal(u.Raw) == nil && st.Code == http.StatusGone
}

// errNoOlder says there is no other endpoint to retry a 410 on.
var errNoOlder = errors.New("no other endpoint to retry the watch on")

// goneRetryBody is a watch body whose first event is checked for a 410;
// on one, retry is asked for another body, which replaces this one if it
// comes. Read and Close come from the reverse proxy's goroutine.
type goneRetryBody struct {
	rc      io.ReadCloser // the current upstream body
	r       io.Reader     // what Read reads: rc, through br until swapped
	framing framing       // framingJSON or framingProtobuf
	checked bool
	retry   func() (io.ReadCloser, error)
}

func newGoneRetryBody(rc io.ReadCloser, f framing, retry func() (io.ReadCloser, error)) *goneRetryBody {
	return &goneRetryBody{rc: rc, r: rc, framing: f, retry: retry}
}

func (b *goneRetryBody) Read(p []byte) (int, error) {
	if !b.checked {
		b.checked = true
		if b.framing == framingProtobuf {
			b.checkProtobuf()
		} else {
			b.checkJSON()
		}
	}
	return b.r.Read(p)
}

// checkProtobuf reads the first length-prefixed frame, retries on a 410,
// and otherwise hands the frame on.
func (b *goneRetryBody) checkProtobuf() {
	br := bufio.NewReaderSize(b.rc, maxFirstEvent)
	// Peek leaves the frame in br for the client unless it is a 410.
	hdr, err := br.Peek(4)
	if err == nil {
		if n := binary.BigEndian.Uint32(hdr); n <= maxFirstEvent-4 {
			var frame []byte
			frame, err = br.Peek(4 + int(n))
			if err == nil && isGoneProtobufEvent(frame[4:]) {
				if next, rerr := b.retry(); rerr == nil {
					_ = b.rc.Close()
					b.rc, b.r = next, next
					return
				}
			}
		}
	}
	b.r = drained(br, nil, b.rc, err)
}

// checkJSON reads the first line, retries on a 410, and otherwise hands
// the line on.
func (b *goneRetryBody) checkJSON() {
	br := bufio.NewReaderSize(b.rc, maxFirstEvent)
	// One event per line; at an error or a full buffer ReadSlice returns
	// what it has, given back to the client below.
	line, err := br.ReadSlice('\n')
	if err == nil && isGoneEvent(line) {
		if next, rerr := b.retry(); rerr == nil {
			_ = b.rc.Close()
			b.rc, b.r = next, next
			return
		}
	}
	b.r = drained(br, line, b.rc, err)
}

// drained gives back head and what br holds beyond it, then reads rc (or
// fails with err), so that br's 64 KiB buffer is not kept for the rest of
// a watch that may last for hours.
func drained(br *bufio.Reader, head []byte, rc io.Reader, err error) io.Reader {
	rest, _ := br.Peek(br.Buffered()) // no I/O: only what is buffered
	pending := make([]byte, 0, len(head)+len(rest))
	pending = append(append(pending, head...), rest...)
	return io.MultiReader(bytes.NewReader(pending), readerOrErr(rc, err))
}

// readerOrErr is r, or a reader failing with err when the first read
// already failed (so the error comes after the bytes read before it).
func readerOrErr(r io.Reader, err error) io.Reader {
	if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
		return errReader{err}
	}
	return r
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func (b *goneRetryBody) Close() error { return b.rc.Close() }

// retryGone makes the retry of a watch that endpoint addr answered with
// 410: on the oldest other usable endpoint, within the retry budget. It
// returns the new response body, wrapped like any other, or an error if
// there is no such endpoint or it did not answer 200.
func (h *Handler) retryGone(out *http.Request, body outBody, st *reqState, addr string) (io.ReadCloser, error) {
	if !body.replayable || out.Context().Err() != nil {
		return nil, errNoOlder
	}
	if !h.budget.allow() {
		h.metrics.budgetExhausted(reasonGone)
		return nil, errNoOlder
	}
	pick, err := h.picker.Pick(balancer.PickInfo{Kind: st.kind, Class: st.class, Avoid: addr, Oldest: true, Unloaded: true})
	if err != nil {
		return nil, errNoOlder
	}
	next := pick.Endpoint.Address()
	sent := h.now()
	resp, err := h.upstream.For(next, st.mode).RoundTrip(body.request(out, next))
	if err != nil {
		pick.Done(balancer.DoneInfo{Err: err})
		return nil, err
	}
	info := balancer.DoneInfo{StatusCode: resp.StatusCode, Latency: h.now().Sub(sent)}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		pick.Done(info)
		return nil, errNoOlder
	}
	h.budget.spend()
	h.metrics.retried(reasonGone)
	st.endpoint = next
	resp.Body = h.watchBody(resp.Body, st.kind, pick, info)
	return h.trackWatch(out, resp, st.kind, next), nil
}
