package watch

import (
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
)

// watchStream is the body of one watch response that the rebalancer may
// end. It passes the apiserver's bytes through unchanged while a
// frameScanner follows the event boundaries, and it ends the stream, when
// asked, right after a complete event: the client sees a watch that the
// server closed normally and re-watches from the resourceVersion of the
// last event it got, which is what client-go's reflector does without
// re-listing.
//
// Read and Close come from the reverse proxy's goroutine; requestEnd and
// the snapshot accessors from the rebalancer's. They share only atomics.
type watchStream struct {
	rc       io.ReadCloser // the upstream body (a doneBody)
	sc       frameScanner
	framing  framing
	endpoint string
	opened   time.Time
	set      *watchSet // unregistered from it at the end
	// onEnd runs once when the stream ends at the rebalancer's request.
	onEnd func(framing)
	// resource ("group/resource"), the URL and header of the request as
	// sent (not the request: its context would stay live with the watch)
	// and send make the watch's freshness request (freshness.go); send is
	// nil when there is none to make.
	resource string
	// api is what the watch is about, for the rebalancer to move it only
	// towards an endpoint that serves it (version skew).
	api    balancer.API
	url    *url.URL
	header http.Header
	send   Send

	// state is the handshake between Read and requestEnd, see below.
	state atomic.Int32
	// lastAt (unix nanoseconds) and lastRV describe the last complete
	// event passed on; lastRV is 0 until an event carried one.
	lastAt      atomic.Int64
	lastRV      atomic.Uint64
	initialDone atomic.Bool
	// maxRV, shared by all streams of a rebalancer, is the highest
	// resourceVersion any of them passed on.
	maxRV *atomic.Uint64
	// events, when not nil, counts the events passed on (bookmarks
	// included): the cost table's (Hook.Track).
	events *atomic.Int64

	// Read goroutine only.
	ended      bool
	removeOnce sync.Once
}

// The states of watchStream.state. Only Read moves between atBoundary and
// midFrame, and only requestEnd moves to the two ending states; each move
// is a compare-and-swap, so a request to end either sees where the bytes
// passed on so far stop, or makes Read see the request before it passes
// on more.
const (
	// stAtBoundary: everything passed on ends with a complete event.
	stAtBoundary int32 = iota
	// stMidFrame: the last bytes passed on are part of an event.
	stMidFrame
	// stEnding: end was asked at a boundary and the upstream body is
	// closed; Read passes nothing more on.
	stEnding
	// stEndAtBoundary: end was asked mid-event; Read passes on the rest of
	// that event and ends there.
	stEndAtBoundary
)

func (w *watchStream) Read(p []byte) (int, error) {
	if w.ended {
		return 0, io.EOF
	}
	n, err := w.rc.Read(p)
	now := time.Now().UnixNano()
	first, atEnd := w.sc.scan(p[:n], func(_ int, fi frameInfo) { w.delivered(now, fi) })
	for {
		switch s := w.state.Load(); s {
		case stAtBoundary, stMidFrame:
			next := s
			if n > 0 {
				next = stMidFrame
				if atEnd {
					next = stAtBoundary
				}
			}
			if !w.state.CompareAndSwap(s, next) {
				continue // requestEnd got in between: look again
			}
			if err != nil {
				w.remove()
			}
			return n, err
		case stEnding:
			// The bytes passed on so far end at a boundary, and the error,
			// if any, is our own Close. What this read brought is dropped:
			// the client re-watches from the last event it got, and gets
			// those events again from the next apiserver.
			return w.finish(0)
		default: // stEndAtBoundary
			if first >= 0 {
				// Keep the whitespace after the event (JSON's newline).
				for first < n && isSpace(p[first]) && w.framing == framingJSON {
					first++
				}
				return w.finish(first)
			}
			if err != nil {
				w.remove()
			}
			return n, err
		}
	}
}

func isSpace(c byte) bool { return c == '\n' || c == ' ' || c == '\r' || c == '\t' }

// finish ends the stream after k more bytes of the current read.
func (w *watchStream) finish(k int) (int, error) {
	w.ended = true
	_ = w.rc.Close() // cancels the upstream stream; idempotent
	w.remove()
	if w.onEnd != nil {
		w.onEnd(w.framing)
	}
	return k, io.EOF
}

// delivered records a complete event.
func (w *watchStream) delivered(now int64, fi frameInfo) {
	w.lastAt.Store(now)
	if w.events != nil {
		w.events.Add(1)
	}
	if fi.rv > 0 {
		w.lastRV.Store(fi.rv)
		raiseUint(w.maxRV, fi.rv)
	}
	if fi.initialDone {
		w.initialDone.Store(true)
	}
}

func raiseUint(v *atomic.Uint64, to uint64) {
	for {
		old := v.Load()
		if to <= old || v.CompareAndSwap(old, to) {
			return
		}
	}
}

func (w *watchStream) Close() error {
	w.remove()
	return w.rc.Close()
}

func (w *watchStream) remove() {
	w.removeOnce.Do(func() { w.set.remove(w) })
}

// requestEnd asks the stream to end at the next event boundary: at once
// if the bytes passed on so far end at one (the upstream body is closed,
// which unblocks a Read waiting for the next event), else right after the
// event in progress. It reports false if an end was already asked.
func (w *watchStream) requestEnd() bool {
	for {
		switch s := w.state.Load(); s {
		case stAtBoundary:
			if w.state.CompareAndSwap(s, stEnding) {
				w.tellEnder()
				_ = w.rc.Close()
				return true
			}
		case stMidFrame:
			if w.state.CompareAndSwap(s, stEndAtBoundary) {
				w.tellEnder()
				return true
			}
		default:
			return false
		}
	}
}

// RebalanceEnder is a watch body (the one Hook.Track was given) that
// wants to know when the rebalancer ends it: EndedByRebalancer is called
// once, before the body is closed, from the rebalancer's goroutine. The
// proxy's body implements it to log why a watch ended.
type RebalanceEnder interface {
	EndedByRebalancer()
}

func (w *watchStream) tellEnder() {
	if e, ok := w.rc.(RebalanceEnder); ok {
		e.EndedByRebalancer()
	}
}

// watchView is what the rebalancer reads of a stream, in one place.
type watchView struct {
	opened      time.Time
	lastAt      time.Time // zero before the first complete event
	lastRV      uint64
	initialDone bool
}

func (w *watchStream) view() watchView {
	v := watchView{opened: w.opened, lastRV: w.lastRV.Load(), initialDone: w.initialDone.Load()}
	if at := w.lastAt.Load(); at != 0 {
		v.lastAt = time.Unix(0, at)
	}
	return v
}

// watchSet holds the open rebalanceable watches by endpoint. mu is held
// only to add or remove a stream, once each per watch, and by the
// rebalancer to copy one endpoint's list; never during I/O.
type watchSet struct {
	mu    sync.Mutex
	byEnd map[string]map[*watchStream]struct{}
}

func (s *watchSet) add(w *watchStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byEnd == nil {
		s.byEnd = map[string]map[*watchStream]struct{}{}
	}
	m := s.byEnd[w.endpoint]
	if m == nil {
		m = map[*watchStream]struct{}{}
		s.byEnd[w.endpoint] = m
	}
	m[w] = struct{}{}
}

func (s *watchSet) remove(w *watchStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byEnd[w.endpoint]
	delete(m, w)
	if len(m) == 0 {
		delete(s.byEnd, w.endpoint)
	}
}

// on returns the streams open on endpoint, oldest first.
func (s *watchSet) on(endpoint string) []*watchStream {
	s.mu.Lock()
	out := make([]*watchStream, 0, len(s.byEnd[endpoint]))
	for w := range s.byEnd[endpoint] {
		out = append(out, w)
	}
	s.mu.Unlock()
	sortByOpened(out)
	return out
}

func (s *watchSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.byEnd {
		n += len(m)
	}
	return n
}
