//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package; the test peer uses its Framer and hpack.

package h2conn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The test peer: a fake server, driven frame by frame by the test, for a
// Conn made inside a synctest bubble over an in-memory connection (the
// idea of x/net's testClientConn). Time is the bubble's, so timeouts take
// no real time and every test is deterministic: after synctest.Wait the
// client has done all it will do until the peer writes again or time
// moves. The peer reads the client's frames without blocking (none
// there: nil) and asserts them exactly; tests in peer_conn_test.go.

// memHalf is one direction of memConn: bytes one end wrote, not yet read
// by the other. Unbounded, so a write never blocks; sync.Cond, so a
// blocked Read is durably blocked for synctest.
type memHalf struct {
	mu     sync.Mutex
	cond   sync.Cond
	buf    bytes.Buffer
	closed bool // an end closed: reads drain, then io.EOF; writes fail
}

func newMemHalf() *memHalf {
	h := &memHalf{}
	h.cond.L = &h.mu
	return h
}

func (h *memHalf) write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, net.ErrClosed
	}
	h.buf.Write(p)
	h.cond.Broadcast()
	return len(p), nil
}

func (h *memHalf) close() {
	h.mu.Lock()
	h.closed = true
	h.cond.Broadcast()
	h.mu.Unlock()
}

// memConn is the client's end of the in-memory connection. Deadlines are
// accepted and ignored: writes never block, and the client sets none on
// reads.
type memConn struct{ in, out *memHalf }

func (c *memConn) Read(p []byte) (int, error) {
	h := c.in
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.buf.Len() == 0 && !h.closed {
		h.cond.Wait()
	}
	if h.buf.Len() == 0 {
		return 0, io.EOF
	}
	return h.buf.Read(p)
}

func (c *memConn) Write(p []byte) (int, error) { return c.out.write(p) }

func (c *memConn) Close() error {
	c.in.close()
	c.out.close()
	return nil
}

func (c *memConn) LocalAddr() net.Addr              { return memAddr("client") }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr("server") }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

type memAddr string

func (a memAddr) Network() string { return "memory" }
func (a memAddr) String() string  { return string(a) }

// errWouldBlock is the peer's read when the client wrote nothing more.
var errWouldBlock = errors.New("no frame from the client (it is blocked)")

// peerReader reads what the client wrote without blocking, once the
// bubble is idle.
type peerReader struct{ h *memHalf }

func (r peerReader) Read(p []byte) (int, error) {
	synctest.Wait()
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.h.buf.Len() == 0 {
		if r.h.closed {
			return 0, io.EOF
		}
		return 0, errWouldBlock
	}
	return r.h.buf.Read(p)
}

// peerWriter writes to the client; wrote counts the bytes it accepted.
type peerWriter struct {
	h     *memHalf
	wrote *int64
}

func (w peerWriter) Write(p []byte) (int, error) {
	n, err := w.h.write(p)
	*w.wrote += int64(n)
	return n, err
}

// testPeer is the fake server of one Conn.
type testPeer struct {
	t      *testing.T
	cc     *Conn
	c2s    *memHalf // the client's writes
	s2c    *memHalf // the peer's writes
	fr     *http2.Framer
	dec    *hpack.Decoder
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	wrote  int64 // bytes the client's end accepted from the peer

	closed   chan struct{} // closed by OnClose
	closedAt time.Time     // the bubble's time then
	goAways  atomic.Int32  // OnGoAway calls
}

// newTestPeer makes a Conn with cfg over an in-memory connection and
// checks its preface: SETTINGS (push off, the stream window, the header
// list limit) and the connection window's WINDOW_UPDATE. Call it inside
// a synctest bubble; the Conn is closed when the test ends.
func newTestPeer(t *testing.T, cfg Config) *testPeer {
	t.Helper()
	p := &testPeer{t: t, c2s: newMemHalf(), s2c: newMemHalf(), closed: make(chan struct{})}
	cfg.OnClose = func(*Conn) {
		p.closedAt = time.Now()
		close(p.closed)
	}
	cfg.OnGoAway = func(*Conn) { p.goAways.Add(1) }
	cc, err := New(&memConn{in: p.s2c, out: p.c2s}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.cc = cc
	t.Cleanup(cc.Close)
	p.fr = http2.NewFramer(peerWriter{p.s2c, &p.wrote}, peerReader{p.c2s})
	p.fr.SetMaxReadFrameSize(1<<24 - 1) // read anything, to see frames too large
	p.dec = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.encBuf)

	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(peerReader{p.c2s}, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("client preface %q, %v", preface, err)
	}
	cfg, _ = cfg.WithDefaults()
	p.wantSettings(map[http2.SettingID]uint32{
		http2.SettingEnablePush:        0,
		http2.SettingInitialWindowSize: uint32(cfg.MaxReceiveBufferPerStream),
		http2.SettingMaxHeaderListSize: maxHeaderListSize,
	})
	p.wantWindowUpdate(0, uint32(cfg.MaxReceiveBufferPerConnection))
	return p
}

// greet sends the server's SETTINGS and acknowledges the client's, and
// wants the client's acknowledgement.
func (p *testPeer) greet(settings ...http2.Setting) {
	p.t.Helper()
	p.writeSettings(settings...)
	if err := p.fr.WriteSettingsAck(); err != nil {
		p.t.Fatal(err)
	}
	p.wantSettingsAck()
}

// readFrame returns the client's next frame, nil if it wrote none (or
// closed the connection).
func (p *testPeer) readFrame() http2.Frame {
	p.t.Helper()
	f, err := p.fr.ReadFrame()
	if err == errWouldBlock || err == io.EOF {
		return nil
	}
	if err != nil {
		p.t.Fatalf("reading the client's frame: %v", err)
	}
	return f
}

// readFrames summarizes every frame the client wrote so far (a Frame is
// valid only until the next is read).
func (p *testPeer) readFrames() []string {
	p.t.Helper()
	var fs []string
	for f := p.readFrame(); f != nil; f = p.readFrame() {
		fs = append(fs, summarize(f))
	}
	return fs
}

// wantFrame reads the client's next frame, which must be a T.
func wantFrame[T http2.Frame](p *testPeer) T {
	p.t.Helper()
	f := p.readFrame()
	v, ok := f.(T)
	if !ok {
		p.t.Fatalf("got frame %s, want %T", summarize(f), v)
	}
	return v
}

func summarize(f http2.Frame) string {
	if f == nil {
		return "none"
	}
	switch f := f.(type) {
	case *http2.RSTStreamFrame:
		return fmt.Sprintf("%v %v", f.Header(), f.ErrCode)
	case *http2.GoAwayFrame:
		return fmt.Sprintf("%v last stream %d %v", f.Header(), f.LastStreamID, f.ErrCode)
	case *http2.WindowUpdateFrame:
		return fmt.Sprintf("%v increment %d", f.Header(), f.Increment)
	}
	return f.Header().String()
}

// wantIdle asserts that the client wrote nothing more.
func (p *testPeer) wantIdle() {
	p.t.Helper()
	if f := p.readFrame(); f != nil {
		p.t.Fatalf("got frame %s, want none", summarize(f))
	}
}

// wantClosed asserts that the client closed the connection (after any
// frames still unread, which it returns summarized).
func (p *testPeer) wantClosed() []string {
	p.t.Helper()
	fs := p.readFrames()
	p.c2s.mu.Lock()
	closed := p.c2s.closed
	p.c2s.mu.Unlock()
	if !closed {
		p.t.Fatal("the client has not closed the connection, want it closed")
	}
	return fs
}

func (p *testPeer) wantSettings(want map[http2.SettingID]uint32) {
	p.t.Helper()
	f := wantFrame[*http2.SettingsFrame](p)
	if f.IsAck() {
		p.t.Fatal("got a SETTINGS ACK, want SETTINGS")
	}
	for id, v := range want {
		if got, ok := f.Value(id); !ok || got != v {
			p.t.Errorf("SETTINGS %v = %d (set: %v), want %d", id, got, ok, v)
		}
	}
}

func (p *testPeer) wantSettingsAck() {
	p.t.Helper()
	if f := wantFrame[*http2.SettingsFrame](p); !f.IsAck() {
		p.t.Fatalf("got SETTINGS %s, want its ACK", summarize(f))
	}
}

func (p *testPeer) wantWindowUpdate(id, inc uint32) {
	p.t.Helper()
	f := wantFrame[*http2.WindowUpdateFrame](p)
	if f.StreamID != id || f.Increment != inc {
		p.t.Fatalf("got %s, want WINDOW_UPDATE stream %d increment %d", summarize(f), id, inc)
	}
}

func (p *testPeer) wantRSTStream(id uint32, code http2.ErrCode) {
	p.t.Helper()
	f := wantFrame[*http2.RSTStreamFrame](p)
	if f.StreamID != id || f.ErrCode != code {
		p.t.Fatalf("got %s, want RST_STREAM stream %d %v", summarize(f), id, code)
	}
}

func (p *testPeer) wantGoAway(last uint32, code http2.ErrCode) {
	p.t.Helper()
	f := wantFrame[*http2.GoAwayFrame](p)
	if f.LastStreamID != last || f.ErrCode != code {
		p.t.Fatalf("got %s, want GOAWAY last stream %d %v", summarize(f), last, code)
	}
}

// wantPing reads a PING (ack: a PING's answer) and returns its data.
func (p *testPeer) wantPing(ack bool) [8]byte {
	p.t.Helper()
	f := wantFrame[*http2.PingFrame](p)
	if f.IsAck() != ack {
		p.t.Fatalf("got %s, want a PING with ACK %v", summarize(f), ack)
	}
	return f.Data
}

// wantHeaders reads a HEADERS frame and its CONTINUATIONs and returns the
// decoded fields by their (lower-case) names, checking the stream ID and
// END_STREAM; maxFrame > 0 bounds each frame's payload.
func (p *testPeer) wantHeaders(id uint32, endStream bool, maxFrame uint32) map[string][]string {
	p.t.Helper()
	h, _ := p.wantHeaderBlock(id, endStream, maxFrame)
	return h
}

// wantHeaderBlock is wantHeaders that also returns the encoded block.
func (p *testPeer) wantHeaderBlock(id uint32, endStream bool, maxFrame uint32) (map[string][]string, []byte) {
	p.t.Helper()
	hf := wantFrame[*http2.HeadersFrame](p)
	if hf.StreamID != id || hf.StreamEnded() != endStream {
		p.t.Fatalf("got %s, want HEADERS on stream %d with END_STREAM %v", summarize(hf), id, endStream)
	}
	block := append([]byte(nil), hf.HeaderBlockFragment()...)
	check := func(f http2.Frame) {
		if maxFrame > 0 && f.Header().Length > maxFrame {
			p.t.Errorf("%v frame of %d bytes, over the server's MAX_FRAME_SIZE %d", f.Header().Type, f.Header().Length, maxFrame)
		}
	}
	check(hf)
	for ended := hf.HeadersEnded(); !ended; {
		cf := wantFrame[*http2.ContinuationFrame](p)
		if cf.StreamID != id {
			p.t.Fatalf("CONTINUATION on stream %d inside stream %d's header block", cf.StreamID, id)
		}
		check(cf)
		block = append(block, cf.HeaderBlockFragment()...)
		ended = cf.HeadersEnded()
	}
	fields, err := p.dec.DecodeFull(block)
	if err != nil {
		p.t.Fatalf("decoding the client's header block: %v", err)
	}
	h := map[string][]string{}
	for _, f := range fields {
		h[f.Name] = append(h[f.Name], f.Value)
	}
	return h, block
}

// wantData reads DATA frames on stream id until size bytes and checks
// END_STREAM on the last, each frame within maxFrame (if > 0).
func (p *testPeer) wantData(id uint32, size int, endStream bool, maxFrame uint32) []byte {
	p.t.Helper()
	var got []byte
	for {
		f := wantFrame[*http2.DataFrame](p)
		if f.StreamID != id {
			p.t.Fatalf("got %s, want DATA on stream %d", summarize(f), id)
		}
		if maxFrame > 0 && f.Length > maxFrame {
			p.t.Fatalf("DATA frame of %d bytes, over MAX_FRAME_SIZE %d", f.Length, maxFrame)
		}
		got = append(got, f.Data()...)
		if len(got) > size {
			p.t.Fatalf("got %d bytes of DATA, want %d", len(got), size)
		}
		if len(got) == size && (!endStream || f.StreamEnded()) {
			if f.StreamEnded() != endStream {
				p.t.Fatalf("after %d bytes END_STREAM is %v, want %v", size, f.StreamEnded(), endStream)
			}
			return got
		}
		if f.StreamEnded() {
			p.t.Fatalf("END_STREAM after %d bytes, want %d", len(got), size)
		}
	}
}

func (p *testPeer) writeSettings(settings ...http2.Setting) {
	p.t.Helper()
	if err := p.fr.WriteSettings(settings...); err != nil {
		p.t.Fatal(err)
	}
}

// headerBlock encodes name, value pairs with the peer's encoder.
func (p *testPeer) headerBlock(kv ...string) []byte {
	p.encBuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), p.encBuf.Bytes()...)
}

// writeHeaders writes one HEADERS frame with the pairs kv.
func (p *testPeer) writeHeaders(id uint32, endStream bool, kv ...string) {
	p.t.Helper()
	err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.headerBlock(kv...), EndStream: endStream, EndHeaders: true})
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *testPeer) writeData(id uint32, endStream bool, data string) {
	p.t.Helper()
	if err := p.fr.WriteData(id, endStream, []byte(data)); err != nil {
		p.t.Fatal(err)
	}
}

// wantAnswered sends a GET of path, wants its HEADERS on stream id and
// answers it 200: the connection still carries requests.
func (p *testPeer) wantAnswered(id uint32, path string) {
	p.t.Helper()
	rt := p.get(p.t.Context(), path)
	p.wantHeaders(id, true, 0)
	p.writeHeaders(id, true, ":status", "200")
	rt.response()
}

// peerRT is a RoundTrip under way on its own goroutine.
type peerRT struct {
	t    *testing.T
	done chan struct{}
	res  *http.Response
	err  error
}

// roundTrip starts req on the peer's Conn and lets the client run until
// it blocks (it has written the request, or failed).
func (p *testPeer) roundTrip(req *http.Request) *peerRT {
	rt := &peerRT{t: p.t, done: make(chan struct{})}
	go func() {
		defer close(rt.done)
		rt.res, rt.err = p.cc.RoundTrip(req)
	}()
	synctest.Wait()
	p.t.Cleanup(func() {
		p.cc.Close()
		<-rt.done
		if rt.res != nil {
			rt.res.Body.Close()
		}
	})
	return rt
}

// get is roundTrip of a GET of path with ctx.
func (p *testPeer) get(ctx context.Context, path string) *peerRT {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://kubernetes"+path, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	return p.roundTrip(req)
}

// post is roundTrip of a POST of body (its length known) with ctx.
func (p *testPeer) post(ctx context.Context, path, body string) *peerRT {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://kubernetes"+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	return p.roundTrip(req)
}

func (rt *peerRT) isDone() bool {
	synctest.Wait()
	select {
	case <-rt.done:
		return true
	default:
		return false
	}
}

// result returns what RoundTrip returned; it must have returned.
func (rt *peerRT) result() (*http.Response, error) {
	rt.t.Helper()
	if !rt.isDone() {
		rt.t.Fatal("RoundTrip has not returned, want it to have")
	}
	return rt.res, rt.err
}

// response returns RoundTrip's answer, which must have come.
func (rt *peerRT) response() *http.Response {
	rt.t.Helper()
	res, err := rt.result()
	if err != nil {
		rt.t.Fatalf("RoundTrip: %v", err)
	}
	return res
}

// wantBody reads the answer's body to its end: want, and no error.
func (rt *peerRT) wantBody(want string) {
	rt.t.Helper()
	b, err := io.ReadAll(rt.response().Body)
	if err != nil || string(b) != want {
		rt.t.Fatalf("body %q, %v; want %q", b, err, want)
	}
}

// bubbleGoroutines counts the goroutines in synctest bubbles, the
// caller's included (the tests of this package do not run in parallel,
// so that is the caller's bubble).
func bubbleGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), ", synctest bubble ")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// inBubble runs f as a subtest in its own synctest bubble.
func inBubble(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}
