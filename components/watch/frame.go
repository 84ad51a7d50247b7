package watch

import (
	"bytes"
	"encoding/binary"
	"mime"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file knows where one watch event ends and the next begins in a
// kube-apiserver watch stream, so that the rebalancer can end a watch
// between two events and never inside one (watchstream.go). It also picks
// out the little the rebalancer needs from each event: its resourceVersion
// and whether it is the bookmark that ends a WatchList's initial events.
// Nothing else is decoded and no event is buffered whole.

// framing is the event framing of a watch response.
type framing uint8

const (
	// framingNone is a stream fanout cannot cut safely; it is never
	// rebalanced. CBOR (application/cbor-seq) is one: see
	// docs/resilience.md.
	framingNone framing = iota
	// framingJSON is one JSON object per event (kube-apiserver writes a
	// newline after each; the scanner does not rely on it).
	framingJSON
	// framingProtobuf is a 4-byte big-endian length, then a
	// metav1.WatchEvent in protobuf.
	framingProtobuf
)

func (f framing) String() string {
	switch f {
	case framingJSON:
		return "json"
	case framingProtobuf:
		return "protobuf"
	}
	return "none"
}

// framingOf returns the framing of a watch response by its Content-Type.
func framingOf(contentType string) framing {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return framingNone
	}
	switch mt {
	case "application/json":
		return framingJSON
	case "application/vnd.kubernetes.protobuf":
		if params["stream"] == "watch" {
			return framingProtobuf
		}
	}
	return framingNone
}

// frameInfo is what a completed event told.
type frameInfo struct {
	rv          uint64 // 0 when not found
	initialDone bool   // the bookmark annotated k8s.io/initial-events-end: "true"
}

// frameScanner follows a stream byte by byte. scan consumes all of p and
// returns the offset in p of the first event boundary (0 when p starts at
// one, -1 when no event ends in p) and whether p ends at a boundary. It
// calls frame for each event that ends in p, with the offset just past
// it. A scanner is used by one goroutine.
type frameScanner interface {
	scan(p []byte, frame func(end int, fi frameInfo)) (first int, atEnd bool)
}

func newScanner(f framing, initialEvents bool) frameScanner {
	switch f {
	case framingJSON:
		return newJSONScanner(initialEvents)
	case framingProtobuf:
		return &protoScanner{initialEvents: initialEvents}
	}
	return nil
}

// matcher finds a fixed pattern in a stream, one byte at a time. The
// patterns it is used with have no proper prefix that is also a suffix
// except their first byte, so restarting on a mismatch is exact.
type matcher struct {
	pat []byte
	i   int
}

func (m *matcher) feed(c byte) bool {
	if c == m.pat[m.i] {
		m.i++
		if m.i == len(m.pat) {
			m.i = 0
			return true
		}
		return false
	}
	m.i = 0
	if c == m.pat[0] {
		m.i = 1
	}
	return false
}

var (
	jsonRVKey       = []byte(`"resourceVersion":"`)
	jsonInitialEnd  = []byte(`"k8s.io/initial-events-end":"true"`)
	jsonBookmarkTag = []byte(`"type":"BOOKMARK"`)
	initialEndKey   = []byte("k8s.io/initial-events-end")
)

// jsonScanner frames a stream of JSON objects by bracket depth, aware of
// strings and escapes, so it needs no newline between events and is not
// fooled by one inside them.
//
// The event's resourceVersion is the first `"resourceVersion":"` in it:
// kube-apiserver writes {"type":…,"object":{"kind":…,"apiVersion":…,
// "metadata":{"name":…,"namespace":…,"uid":…,"resourceVersion":…,
// so the object's own comes before any nested one (custom resources are
// written with sorted keys, "metadata" before "spec" and "status"). A
// quote inside a string is always escaped, so the pattern cannot match
// inside a value.
type jsonScanner struct {
	depth  int
	inStr  bool
	esc    bool
	rvKey  matcher
	rvDone bool // the first match of this event was taken
	inRV   bool // reading the digits after the key
	rv     uint64
	rvOK   bool
	// For WatchList streams only: whether this event is a bookmark and
	// carries the end-of-initial-events annotation.
	initial    bool
	bookmark   matcher
	isBookmark bool
	endKey     matcher
	isEnd      bool
}

func newJSONScanner(initialEvents bool) *jsonScanner {
	return &jsonScanner{rvKey: matcher{pat: jsonRVKey}, initial: initialEvents,
		bookmark: matcher{pat: jsonBookmarkTag}, endKey: matcher{pat: jsonInitialEnd}}
}

func (s *jsonScanner) scan(p []byte, frame func(int, frameInfo)) (int, bool) {
	first := -1
	if s.depth == 0 {
		first = 0
	}
	for i, c := range p {
		if s.depth > 0 {
			s.observe(c)
		}
		if s.inStr {
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth++
		case '}', ']':
			s.depth--
			if s.depth == 0 {
				fi := frameInfo{initialDone: s.isBookmark && s.isEnd}
				if s.rvOK {
					fi.rv = s.rv
				}
				s.reset()
				if first < 0 {
					first = i + 1
				}
				frame(i+1, fi)
			}
		}
	}
	return first, s.depth == 0
}

// observe feeds one byte inside an event to the field matchers.
func (s *jsonScanner) observe(c byte) {
	switch {
	case s.inRV:
		if c >= '0' && c <= '9' && s.rv < 1<<59 {
			s.rv = s.rv*10 + uint64(c-'0')
			return
		}
		s.inRV = false
		s.rvOK = c == '"' && s.rv > 0
	case !s.rvDone:
		if s.rvKey.feed(c) {
			s.rvDone, s.inRV = true, true
		}
	}
	if s.initial {
		if !s.isBookmark && s.bookmark.feed(c) {
			s.isBookmark = true
		}
		if !s.isEnd && s.endKey.feed(c) {
			s.isEnd = true
		}
	}
}

func (s *jsonScanner) reset() {
	s.rvKey.i, s.rvDone, s.inRV, s.rv, s.rvOK = 0, false, false, 0, false
	s.bookmark.i, s.isBookmark, s.endKey.i, s.isEnd = 0, false, 0, false
}

// protoPrefix is how much of each protobuf event is kept to read its type,
// resourceVersion and annotations: they come first in the encoding, far
// within this for any object name and namespace Kubernetes allows, and a
// bookmark is whole within it.
const protoPrefix = 1024

// protoScanner frames length-prefixed protobuf events.
type protoScanner struct {
	initialEvents bool
	hdr           [4]byte
	hn            int    // header bytes read of the current event
	left          uint32 // payload bytes still to come
	prefix        []byte // the payload's first bytes, up to protoPrefix
}

func (s *protoScanner) atBoundary() bool { return s.hn == 0 && s.left == 0 }

func (s *protoScanner) scan(p []byte, frame func(int, frameInfo)) (int, bool) {
	first := -1
	if s.atBoundary() {
		first = 0
	}
	for i := 0; i < len(p); {
		if s.hn < 4 {
			s.hdr[s.hn] = p[i]
			s.hn++
			i++
			if s.hn == 4 {
				s.left = binary.BigEndian.Uint32(s.hdr[:])
				s.prefix = s.prefix[:0]
				if s.left == 0 {
					// An empty event: a boundary all the same.
					s.hn = 0
					if first < 0 {
						first = i
					}
					frame(i, frameInfo{})
				}
			}
			continue
		}
		n := min(uint32(len(p)-i), s.left)
		if room := protoPrefix - len(s.prefix); room > 0 {
			s.prefix = append(s.prefix, p[i:i+min(int(n), room)]...)
		}
		i += int(n)
		s.left -= n
		if s.left == 0 {
			s.hn = 0
			if first < 0 {
				first = i
			}
			frame(i, protoFrameInfo(s.prefix, s.initialEvents))
		}
	}
	return first, s.atBoundary()
}

// protoFrameInfo reads a metav1.WatchEvent from the first bytes of its
// encoding: type is field 1, object field 2, a RawExtension whose raw
// bytes (field 1) are "k8s\x00" and a runtime.Unknown, whose raw object
// (field 2) has its ObjectMeta as field 1, whose resourceVersion is
// field 6. A field cut off by the prefix yields what is there.
func protoFrameInfo(b []byte, initialEvents bool) frameInfo {
	var fi frameInfo
	obj := protoField(protoField(b, 2), 1)
	obj, ok := bytes.CutPrefix(obj, []byte("k8s\x00"))
	if !ok {
		return fi
	}
	rv := protoField(protoField(protoField(obj, 2), 1), 6)
	if v, err := strconv.ParseUint(string(rv), 10, 64); err == nil {
		fi.rv = v
	}
	if initialEvents && string(protoField(b, 1)) == "BOOKMARK" {
		// The annotation's key and value follow each other in the map
		// entry; a bookmark carries no other annotation that could hold
		// the key as a value.
		if i := bytes.Index(obj, initialEndKey); i >= 0 {
			rest := obj[i+len(initialEndKey):]
			fi.initialDone = len(rest) >= 6 && rest[0] == 0x12 && rest[1] == 4 && string(rest[2:6]) == "true"
		}
	}
	return fi
}

// protoField returns the content of the first length-delimited field num
// in b, cut short if b ends inside it; nil if b has no such field before
// it ends or turns out not to be protobuf.
func protoField(b []byte, num protowire.Number) []byte {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if typ == protowire.BytesType {
			size, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return nil
			}
			b = b[l:]
			if n == num {
				return b[:min(uint64(len(b)), size)]
			}
			if size > uint64(len(b)) {
				return nil
			}
			b = b[size:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil
		}
		b = b[l:]
	}
	return nil
}
