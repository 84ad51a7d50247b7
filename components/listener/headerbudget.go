package listener

import (
	"net/http"

	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/kstatus"
)

// The header budget (Config.HeaderBudget, --header-budget) bounds the
// request header bytes fanout holds, all connections and requests
// together; --max-header-bytes bounds one header only, and with 1 MiB on
// each of --max-connections connections (1843 under 256Mi) the sum would
// be 1.8 GiB. net/http's server and kube-apiserver have the per-header
// bound only (http.Server.MaxHeaderBytes, 1 MiB in kube-apiserver).
//
// Who takes what:
//   - plaintext HTTP/1.1 (internal/h1server): each header past its first
//     4 KiB, as it is read, until its handler returns; a header that finds
//     the budget spent gets 431 and its connection is closed;
//   - h2c: each connection --max-header-bytes for its life (net/http
//     reads one header block at a time on it; a connection the budget
//     cannot spare is closed at once), and each request its header's
//     HTTP/2 size (withHeaderBudget) until its handler returns, 431 when
//     spent;
//   - with --listen-tls, every request its header's size (withHeaderBudget);
//     the header being read is bounded per connection only, and only a
//     client holding the listener's client certificate gets to send one;
//   - with --h1-server std (net/http's server, for comparison), every
//     request its header's size likewise, HTTP/1.1 and h2c; the header
//     being read is bounded per connection only, and an h2c connection
//     holds nothing for its life.

// rejectHeaderBudget is the 431's message.
const rejectHeaderBudget = "fanout: request headers held by all clients together are at --header-budget; retry later or send smaller headers"

// withHeaderBudget takes each request's header size from b for as long as
// next serves it, and answers 431 when b cannot spare it. HTTP/1.x
// requests that h1server read took their share as they were read (ownH1),
// and pass.
func withHeaderBudget(next http.Handler, b *budget.Bytes, ownH1 bool) http.Handler {
	if b == nil {
		return next
	}
	return &headerBudget{next: next, b: b, ownH1: ownH1}
}

// headerBudget is withHeaderBudget's handler.
type headerBudget struct {
	next  http.Handler
	b     *budget.Bytes
	ownH1 bool
}

func (h *headerBudget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.ownH1 && r.ProtoMajor == 1 {
		h.next.ServeHTTP(w, r)
		return
	}
	n := headerSize(r)
	if !h.b.Take(n) {
		kstatus.Write(w, http.StatusRequestHeaderFieldsTooLarge, kstatus.ReasonUnknown, rejectHeaderBudget)
		return
	}
	defer h.b.Give(n)
	h.next.ServeHTTP(w, r)
}

// headerSize is r's header as HTTP/2 counts it against
// SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 6.5.2: each field's name and
// value and 32 bytes), the pseudo-header fields included: what net/http
// checked against --max-header-bytes. Not inlined: its map iterator would
// sit in the frame below which a watch stays parked for its life
// (cmd/fanout's TestFootprintPerWatch).
//
//go:noinline
func headerSize(r *http.Request) int64 {
	const perField = 32
	n := int64(len(":method")+len(r.Method)+len(":path")+len(r.RequestURI)+
		len(":scheme")+len("https")+len(":authority")+len(r.Host)) + 4*perField
	for k, vv := range r.Header {
		for _, v := range vv {
			n += int64(len(k)+len(v)) + perField
		}
	}
	return n
}
