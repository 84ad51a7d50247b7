package watch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// testEvent is one event of a generated watch stream.
type testEvent struct {
	typ         watch.EventType
	rv          uint64
	initialDone bool
	// data makes the event hard to frame: braces, quotes, escapes and a
	// fake resourceVersion inside strings.
	data map[string]string
}

func testEvents() []testEvent {
	return []testEvent{
		{typ: watch.Added, rv: 101, data: map[string]string{"a": `}{"resourceVersion":"9"`}},
		{typ: watch.Added, rv: 102, data: map[string]string{"b": "\\\"}]\n\t{", "c": "ünïcode ✓"}},
		{typ: watch.Bookmark, rv: 103, initialDone: true},
		{typ: watch.Modified, rv: 250, data: map[string]string{"big": string(bytes.Repeat([]byte("x{\""), 3000))}},
		{typ: watch.Bookmark, rv: 260},
		{typ: watch.Deleted, rv: 999999999999, data: map[string]string{"d": `\`}},
	}
}

func (e testEvent) object() *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(e.rv, 10)},
	}
	if e.typ == watch.Bookmark {
		if e.initialDone {
			cm.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		}
		return cm
	}
	cm.Name, cm.Namespace, cm.UID = "cm-"+strconv.FormatUint(e.rv, 10), "ns", "0d6c0a6e-2f0e-4c1b-9d7a-5d1d2a3b4c5d"
	cm.Labels = map[string]string{"resourceVersion": "1"}
	cm.Data = e.data
	return cm
}

// encodeStream writes events as kube-apiserver does and returns the
// stream and the offset just past each event.
func encodeStream(t testing.TB, f framing, events []testEvent) ([]byte, []int) {
	t.Helper()
	var buf bytes.Buffer
	var ends []int
	for _, e := range events {
		switch f {
		case framingJSON:
			obj, err := json.Marshal(e.object())
			if err != nil {
				t.Fatal(err)
			}
			line, err := json.Marshal(metav1.WatchEvent{Type: string(e.typ), Object: runtime.RawExtension{Raw: obj}})
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(line)
			ends = append(ends, buf.Len())
			buf.WriteByte('\n')
		case framingProtobuf:
			// The object with the "k8s\x00" envelope, inside a WatchEvent
			// without one, length-prefixed: protobuf watch as served.
			var obj bytes.Buffer
			if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(e.object(), &obj); err != nil {
				t.Fatal(err)
			}
			var ev bytes.Buffer
			if err := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme).Encode(&metav1.WatchEvent{Type: string(e.typ), Object: runtime.RawExtension{Raw: obj.Bytes()}}, &ev); err != nil {
				t.Fatal(err)
			}
			if err := binary.Write(&buf, binary.BigEndian, uint32(ev.Len())); err != nil {
				t.Fatal(err)
			}
			buf.Write(ev.Bytes())
			ends = append(ends, buf.Len())
		}
	}
	return buf.Bytes(), ends
}

// splits cuts n bytes into random pieces of 1 to max bytes.
func splits(r *rand.Rand, n, maxLen int) []int {
	var out []int
	for n > 0 {
		k := min(n, 1+r.IntN(maxLen))
		out = append(out, k)
		n -= k
	}
	return out
}

func TestFrameScannerAcrossSplits(t *testing.T) {
	events := testEvents()
	for _, f := range []framing{framingJSON, framingProtobuf} {
		stream, ends := encodeStream(t, f, events)
		for _, maxLen := range []int{1, 2, 3, 7, 64, 4096, len(stream)} {
			for seed := range uint64(8) {
				t.Run(fmt.Sprintf("%s/max%d/seed%d", f, maxLen, seed), func(t *testing.T) {
					sc := newScanner(f, true)
					var gotEnds []int
					var infos []frameInfo
					off := 0
					for _, k := range splits(rand.New(rand.NewPCG(seed, 1)), len(stream), maxLen) {
						p := stream[off : off+k]
						first, atEnd := sc.scan(p, func(end int, fi frameInfo) {
							gotEnds = append(gotEnds, off+end)
							infos = append(infos, fi)
						})
						wantFirst := -1
						if isEventEnd(off, ends, 0) || (f == framingJSON && isEventEnd(off, ends, 1)) {
							wantFirst = 0
						} else {
							for _, e := range ends {
								if e > off && e <= off+k {
									wantFirst = e - off
									break
								}
							}
						}
						if first != wantFirst {
							t.Fatalf("chunk [%d,%d): first boundary %d, want %d", off, off+k, first, wantFirst)
						}
						if want := isEventEnd(off+k, ends, 0); atEnd != want && !(f == framingJSON && isEventEnd(off+k, ends, 1)) {
							t.Fatalf("chunk [%d,%d): at boundary %v, want %v", off, off+k, atEnd, want)
						}
						off += k
					}
					if fmt.Sprint(gotEnds) != fmt.Sprint(ends) {
						t.Fatalf("event ends %v, want %v", gotEnds, ends)
					}
					for i, e := range events {
						if infos[i].rv != e.rv || infos[i].initialDone != e.initialDone {
							t.Errorf("event %d (%s): scanned rv %d, initial-events end %v; want %d, %v", i, e.typ, infos[i].rv, infos[i].initialDone, e.rv, e.initialDone)
						}
					}
				})
			}
		}
	}
}

// isEventEnd reports whether off is an event end, or (slack 1) just past
// the newline after one, or the start of the stream.
func isEventEnd(off int, ends []int, slack int) bool {
	if off == 0 {
		return true
	}
	for _, e := range ends {
		if off == e+slack {
			return true
		}
	}
	return false
}

func TestFramingOf(t *testing.T) {
	for _, tt := range []struct {
		ct   string
		want framing
	}{
		{"application/json", framingJSON},
		{"application/json;charset=utf-8", framingJSON},
		{"application/vnd.kubernetes.protobuf;stream=watch", framingProtobuf},
		{"application/vnd.kubernetes.protobuf", framingNone},
		{"application/cbor-seq", framingNone},
		{"application/cbor", framingNone},
		{"text/plain", framingNone},
		{"", framingNone},
	} {
		if got := framingOf(tt.ct); got != tt.want {
			t.Errorf("framingOf(%q) = %s, want %s", tt.ct, got, tt.want)
		}
	}
}

// chunkReader returns a stream in given pieces and fails once closed, as
// an HTTP/2 response body does.
type chunkReader struct {
	data   []byte
	sizes  []int
	closed atomic.Bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, errors.New("http2: response body closed")
	}
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), len(c.data))
	if len(c.sizes) > 0 {
		k = min(k, c.sizes[0])
		if c.sizes[0] -= k; c.sizes[0] == 0 {
			c.sizes = c.sizes[1:]
		}
	}
	n := copy(p, c.data[:k])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkReader) Close() error { c.closed.Store(true); return nil }

func newTestStream(rc io.ReadCloser, f framing) *watchStream {
	w := &watchStream{rc: rc, sc: newScanner(f, false), framing: f, endpoint: "a", opened: time.Now(),
		set: &watchSet{}, maxRV: new(atomic.Uint64)}
	w.initialDone.Store(true)
	w.set.add(w)
	return w
}

// checkCut fails unless out is the stream up to an event boundary (for
// JSON, the newline after it may or may not be included).
func checkCut(t *testing.T, stream, out []byte, ends []int) {
	t.Helper()
	if !bytes.HasPrefix(stream, out) {
		t.Fatalf("the client got %d bytes that are not the stream's first ones", len(out))
	}
	if !isEventEnd(len(out), ends, 0) && !isEventEnd(len(out), ends, 1) {
		t.Fatalf("the stream was cut at byte %d, inside an event (events end at %v)", len(out), ends)
	}
}

// TestWatchStreamEndsAtBoundary asks for the end after each number of
// reads of randomly split streams: the client must always get whole
// events, then a clean io.EOF.
func TestWatchStreamEndsAtBoundary(t *testing.T) {
	for _, f := range []framing{framingJSON, framingProtobuf} {
		stream, ends := encodeStream(t, f, testEvents())
		for seed := range uint64(12) {
			r := rand.New(rand.NewPCG(seed, 2))
			sizes := splits(r, len(stream), 1+r.IntN(300))
			step := max(1, len(sizes)/150)
			for after := 0; after <= len(sizes); after += step {
				src := &chunkReader{data: stream, sizes: slicesClone(sizes)}
				w := newTestStream(src, f)
				var out bytes.Buffer
				buf := make([]byte, 512)
				var err error
				for i := 0; err == nil; i++ {
					if i == after {
						w.requestEnd()
					}
					var n int
					n, err = w.Read(buf)
					out.Write(buf[:n])
				}
				if !errors.Is(err, io.EOF) {
					t.Fatalf("%s seed %d, end after %d reads: the stream ended with %v, want io.EOF", f, seed, after, err)
				}
				checkCut(t, stream, out.Bytes(), ends)
				if after < len(sizes) && !src.closed.Load() {
					t.Fatalf("%s seed %d, end after %d reads: the upstream body was not closed", f, seed, after)
				}
				if w.set.count() != 0 {
					t.Fatalf("the ended stream is still registered")
				}
			}
		}
	}
}

func slicesClone(s []int) []int { return append([]int(nil), s...) }

// TestWatchStreamEndConcurrent has a writer feed events through a pipe in
// random pieces at random times while another goroutine asks for the end:
// the race between requestEnd and Read must never cut an event.
func TestWatchStreamEndConcurrent(t *testing.T) {
	for _, f := range []framing{framingJSON, framingProtobuf} {
		stream, ends := encodeStream(t, f, testEvents())
		for seed := range uint64(200) {
			r := rand.New(rand.NewPCG(seed, 3))
			pr, pw := io.Pipe()
			w := newTestStream(pr, f)
			var wg sync.WaitGroup
			wg.Go(func() {
				off := 0
				for _, k := range splits(r, len(stream), 1+int(seed%97)) {
					if _, err := pw.Write(stream[off : off+k]); err != nil {
						return
					}
					off += k
					if seed%3 == 0 {
						time.Sleep(time.Duration(seed%5) * 10 * time.Microsecond)
					}
				}
				_ = pw.Close()
			})
			delay := time.Duration(seed%13) * 20 * time.Microsecond
			wg.Go(func() {
				time.Sleep(delay)
				w.requestEnd()
			})
			out, err := io.ReadAll(w)
			_ = pr.Close()
			wg.Wait()
			if err != nil {
				t.Fatalf("%s seed %d: the stream ended with %v, want io.EOF", f, seed, err)
			}
			checkCut(t, stream, out, ends)
		}
	}
}

func TestWatchStreamRecordsEvents(t *testing.T) {
	stream, _ := encodeStream(t, framingProtobuf, testEvents())
	// In a bubble time stands still until every goroutine in it blocks:
	// the events are read at now.
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		rc := &chunkReader{data: stream, sizes: splits(rand.New(rand.NewPCG(1, 1)), len(stream), 50)}
		w := &watchStream{rc: rc, sc: newScanner(framingProtobuf, true), framing: framingProtobuf, endpoint: "a",
			opened: now, set: &watchSet{}, maxRV: new(atomic.Uint64)}
		w.set.add(w)
		buf := make([]byte, 40)
		sawInitialDoneAt := uint64(0)
		for {
			_, err := w.Read(buf)
			if w.initialDone.Load() && sawInitialDoneAt == 0 {
				sawInitialDoneAt = w.lastRV.Load()
			}
			if err != nil {
				break
			}
		}
		if sawInitialDoneAt != 103 {
			t.Errorf("initial events were done at resourceVersion %d, want at the bookmark 103", sawInitialDoneAt)
		}
		if got := w.lastRV.Load(); got != 999999999999 {
			t.Errorf("last resourceVersion %d, want 999999999999", got)
		}
		if got := w.maxRV.Load(); got != 999999999999 {
			t.Errorf("highest resourceVersion %d, want 999999999999", got)
		}
		if v := w.view(); !v.lastAt.Equal(now) {
			t.Errorf("last event at %v, want %v", v.lastAt, now)
		}
	})
}

// TestScanApiserverWatchList feeds a WatchList stream exactly as
// kube-apiserver v1.37.2 served it (kubectl get --raw
// '...configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan').
func TestScanApiserverWatchList(t *testing.T) {
	stream := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"rebalance-tick","namespace":"e2e-rebalance","uid":"fffb7cea-4fda-4ad5-88b9-7d27e4b815fd","resourceVersion":"400","creationTimestamp":"2026-11-30T09:36:12Z"},"data":{"i":"70"}}}
{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"400","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"rebalance-tick","namespace":"e2e-rebalance","uid":"fffb7cea-4fda-4ad5-88b9-7d27e4b815fd","resourceVersion":"401","creationTimestamp":"2026-11-30T09:36:12Z"},"data":{"i":"71"}}}
`
	sc := newScanner(framingJSON, true)
	var got []frameInfo
	sc.scan([]byte(stream), func(_ int, fi frameInfo) { got = append(got, fi) })
	want := []frameInfo{{rv: 400}, {rv: 400, initialDone: true}, {rv: 401}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scanned %v, want %v", got, want)
	}
}

// enderBody is an upstream body that records when it is told the
// rebalancer ends it, and whether it was closed by then.
type enderBody struct {
	io.Reader
	told, closed     atomic.Bool
	closedBeforeTold bool
}

func (b *enderBody) EndedByRebalancer() {
	b.closedBeforeTold = b.closed.Load()
	b.told.Store(true)
}

func (b *enderBody) Close() error { b.closed.Store(true); return nil }

// TestRequestEndTellsTheBody: a body that is a RebalanceEnder hears that
// the rebalancer ends it before it is closed, at a boundary and mid-event.
func TestRequestEndTellsTheBody(t *testing.T) {
	stream, _ := encodeStream(t, framingJSON, testEvents())
	for _, first := range []int{0, 3} {
		body := &enderBody{Reader: bytes.NewReader(stream)}
		w := newTestStream(body, framingJSON)
		if first > 0 {
			// Mid-event: part of the first event passed on.
			if _, err := w.Read(make([]byte, first)); err != nil {
				t.Fatal(err)
			}
		}
		w.requestEnd()
		if _, err := io.ReadAll(w); err != nil {
			t.Fatal(err)
		}
		if !body.told.Load() || body.closedBeforeTold || !body.closed.Load() {
			t.Errorf("after %d bytes: told %v (closed before: %v), closed %v; want told, then closed", first, body.told.Load(), body.closedBeforeTold, body.closed.Load())
		}
	}
}
