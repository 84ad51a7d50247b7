package watch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/fanout-dev/fanout/internal/kstatus"
)

// A young apiserver's watch cache starts at the resourceVersion it had when
// it started, so it answers a watch from an older resourceVersion with
// 410 Gone, as the first event of a 200 stream; the reflector then re-lists,
// which is the flood fanout exists to prevent. An apiserver that has run
// longer usually still holds that history. So, before passing such a 410
// on, the proxy retries the watch once on the endpoint that has been usable
// longest (balancer.PickInfo.Oldest; Hook.Track's Resend); if that one
// says 410 too, the client gets it.
//
// JSON (one event per line) and protobuf (length-prefixed frames) watch
// streams are inspected; CBOR streams pass through as they come.

// maxFirstEvent bounds the first event read to look for a 410; a Status is
// far smaller, and a larger first event is an object, passed on as is. The
// buffer grows with the event's bytes, so this is a bound, not a cost.
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
// protobuf watch without its prefix, is an ERROR event carrying a 410
// Status (kstatus.ProtobufWatchEvent, kstatus.ProtobufStatus).
// FuzzIsGoneProtobufEventMatchesGogo compares it with the generated
// Unmarshal methods.
func isGoneProtobufEvent(ev []byte) bool {
	typ, object, ok := kstatus.ProtobufWatchEvent(ev)
	if !ok || typ != "ERROR" {
		return false
	}
	_, code, ok := kstatus.ProtobufStatus(object)
	return ok && code == http.StatusGone
}

// goneRetryBody is a watch body whose first event is checked for a 410;
// on one, retry is asked for another body, which replaces this one if it
// comes. Read and Close come from the reverse proxy's goroutine.
//
// Once the first event is checked, the body lets go of all it needed for
// that: retry (and with it the request and its attempts, which the retry
// would have resent) and, once passed on, the first event's bytes. A watch
// is open for minutes; those would otherwise stay with it.
type goneRetryBody struct {
	rc      io.ReadCloser // the current upstream body
	framing framing       // framingJSON or framingProtobuf
	checked bool
	retry   func() (io.ReadCloser, error)
	// first is the first event's bytes (and any that came with them)
	// not yet passed on, and firstErr the read error that ended them, if
	// any, returned once they are.
	first    []byte
	firstErr error
}

func newGoneRetryBody(rc io.ReadCloser, f framing, retry func() (io.ReadCloser, error)) *goneRetryBody {
	return &goneRetryBody{rc: rc, framing: f, retry: retry}
}

func (b *goneRetryBody) Read(p []byte) (int, error) {
	if !b.checked {
		b.checked = true
		b.check(p)
		b.retry = nil
	}
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		if len(b.first) == 0 {
			b.first = nil
		}
		return n, nil
	}
	if b.firstErr != nil {
		return 0, b.firstErr
	}
	return b.rc.Read(p)
}

// check reads the first event, retries the watch on a 410, and otherwise
// hands the event on. Until the first bytes arrive it holds no buffer of
// its own: it reads into p, the caller's copy buffer, and keeps only what
// came, so a watch waiting for its first event (which may take minutes on
// a quiet resource) costs nothing here. The event is collected in a buffer
// that grows with it, up to maxFirstEvent.
func (b *goneRetryBody) check(p []byte) {
	if len(p) == 0 {
		p = make([]byte, 512) // only for a caller reading 0 bytes at first
	}
	var got []byte
	var err error
	for {
		var n int
		n, err = b.rc.Read(p)
		got = append(got, p[:n]...)
		event, complete := b.firstEvent(got)
		if complete && event != nil && b.isGone(event) {
			if next, rerr := b.retry(); rerr == nil {
				_ = b.rc.Close()
				b.rc = next
				return
			}
		}
		if complete || err != nil || len(got) >= maxFirstEvent {
			break
		}
	}
	b.first, b.firstErr = got, err
}

// firstEvent finds the first event in got. complete is true once no more
// bytes are needed to decide: the event is whole (event set), or it cannot
// be a 410 the proxy would look at (event nil: a protobuf frame larger
// than maxFirstEvent).
func (b *goneRetryBody) firstEvent(got []byte) (event []byte, complete bool) {
	if b.framing == framingProtobuf {
		if len(got) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(got)
		if n > maxFirstEvent-4 {
			return nil, true
		}
		if len(got) < 4+int(n) {
			return nil, false
		}
		return got[4 : 4+int(n)], true
	}
	// JSON: one event per line.
	if i := bytes.IndexByte(got, '\n'); i >= 0 {
		return got[:i+1], true
	}
	return nil, false
}

func (b *goneRetryBody) isGone(event []byte) bool {
	if b.framing == framingProtobuf {
		return isGoneProtobufEvent(event)
	}
	return isGoneEvent(event)
}

func (b *goneRetryBody) Close() error { return b.rc.Close() }
