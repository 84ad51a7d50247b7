//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package; these tests use its Framer, hpack and Transport as a reference client.

package h2conn

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Tests of the connection. Each drives it, through the test pool of
// harness_test.go (clients.For), against net/http's HTTP/2 server or
// against scriptH2, a hand-driven server for frame sequences net/http
// never sends.

// --- helpers ---------------------------------------------------------

// scriptH2 is a raw HTTP/2 TLS server: it acknowledges SETTINGS, answers
// and counts PINGs, and hands every request's HEADERS (decoded) to
// serve, which writes the answer's frames itself. serve runs on the
// connection's only goroutine, so the frames it writes precede, on the
// wire, those of any request read after it. It ignores the client's
// flow-control windows: answers must stay small.
type scriptH2 struct {
	*testkit.RawH2
	serve func(c *scriptConn, id uint32, path string)

	pings atomic.Int32 // PINGs answered
}

type scriptConn struct {
	fr  *http2.Framer
	buf bytes.Buffer
	enc *hpack.Encoder
}

func newScriptH2(t *testing.T, p *testkit.PKI, serve func(c *scriptConn, id uint32, path string)) *scriptH2 {
	t.Helper()
	cfg := p.CA.ServerTLSConfig(p.Serving, tls.NoClientCert)
	cfg.NextProtos = []string{http2.NextProtoTLS}
	s := &scriptH2{serve: serve}
	s.RawH2 = testkit.NewRawH2(t, cfg, s.serveConn)
	return s
}

func (s *scriptH2) serveConn(c net.Conn) {
	sc := &scriptConn{fr: http2.NewFramer(c, c)}
	sc.enc = hpack.NewEncoder(&sc.buf)
	sc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if sc.fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := sc.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && sc.fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				s.pings.Add(1)
				if sc.fr.WritePing(true, f.Data) != nil {
					return
				}
			}
		case *http2.MetaHeadersFrame:
			s.serve(sc, f.StreamID, f.PseudoValue("path"))
		}
	}
}

// headers writes a HEADERS frame with the given name, value pairs.
func (c *scriptConn) headers(id uint32, end bool, kv ...string) {
	c.buf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndStream: end, EndHeaders: true})
}

func (c *scriptConn) data(id uint32, end bool, s string) { c.fr.WriteData(id, end, []byte(s)) }

// nextFrame is the client's next frame for a serve that reads past the
// request's HEADERS: PINGs and SETTINGS are answered as serveConn does
// and not returned (their ACKs are).
func (c *scriptConn) nextFrame() (http2.Frame, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				c.fr.WritePing(true, f.Data)
				continue
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.fr.WriteSettingsAck()
				continue
			}
		}
		return f, nil
	}
}

// within waits for ch to be closed or to deliver, failing the test after
// d: a bound on an event that is expected, never a wait for something
// not to happen.
func within[T any](t *testing.T, d time.Duration, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// getBody sends GET path on rt, failing the test if it gets no answer,
// and returns the answer and its body read to the end; the body is closed
// when the test ends.
func getBody(t *testing.T, rt http.RoundTripper, addr, path string) (*http.Response, []byte, error) {
	t.Helper()
	res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), addr, path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// readAsync reads body to its end (or error) on a goroutine.
func readAsync(body io.Reader) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, body)
		ch <- err
	}()
	return ch
}

// watchServer serves /watch: it writes and flushes one line, then holds
// the stream until the request's context ends, which it reports by
// closing the channel it sent on started. /hang holds the stream without
// any answer. Anything else is answered "ok".
type watchServer struct {
	*h2Server
	started chan chan struct{} // one per request: closed when its context ends
	running atomic.Int32       // handlers of /watch or /hang currently blocked
}

func newWatchServer(t *testing.T, p *testkit.PKI, auth tls.ClientAuthType, maxStreams int) *watchServer {
	t.Helper()
	s := &watchServer{started: make(chan chan struct{}, 100)}
	s.h2Server = newH2Server(t, p, auth, maxStreams, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/watch", "/hang":
			s.running.Add(1)
			defer s.running.Add(-1)
			done := make(chan struct{})
			defer close(done)
			if r.URL.Path == "/watch" {
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, `{"type":"ADDED"}`+"\n")
				w.(http.Flusher).Flush()
			}
			select {
			case s.started <- done:
			default:
			}
			<-r.Context().Done()
		default:
			io.WriteString(w, "ok")
		}
	}))
	return s
}

// pattern returns n pseudo-random bytes determined by seed.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// settledGoroutines returns runtime.NumGoroutine once it read the same
// value three times in a row.
func settledGoroutines() int {
	last, same := -1, 0
	for i := 0; i < 200 && same < 3; i++ {
		n := runtime.NumGoroutine()
		if n == last {
			same++
		} else {
			last, same = n, 1
		}
		time.Sleep(5 * time.Millisecond)
	}
	return last
}

// --- 1. flow control -------------------------------------------------

// TestH2ClientFlowControlSlowReader: a response many times the stream
// window (64 KiB) and the connection window (128 KiB + 65,535) arrives
// whole when read slowly, which needs fanout to give both windows back
// with WINDOW_UPDATEs as the body is read; and the server never gets
// further ahead of the reader than the stream window (the memory bound).
// Also with four such streams read at once on one connection.
func TestH2ClientFlowControlSlowReader(t *testing.T) {
	const window = 64 << 10
	p := testkit.NewPKI(t, serverName)
	var mu sync.Mutex
	written := map[string]*atomic.Int64{}
	counter := func(path string) *atomic.Int64 {
		mu.Lock()
		defer mu.Unlock()
		if written[path] == nil {
			written[path] = new(atomic.Int64)
		}
		return written[path]
	}
	sizes := map[string]int{"/one": 1 << 20, "/s0": 512 << 10, "/s1": 512 << 10, "/s2": 512 << 10, "/s3": 512 << 10}
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := pattern(len(r.URL.Path)+int(r.URL.Path[len(r.URL.Path)-1]), sizes[r.URL.Path])
		n := counter(r.URL.Path)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		for off := 0; off < len(body); off += 4 << 10 {
			k, err := w.Write(body[off:min(off+4<<10, len(body))])
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	}))
	rt := newClients(t, p, Config{MaxReceiveBufferPerStream: window, MaxReceiveBufferPerConnection: 128 << 10}).For(srv.addr)

	// get reads path in small pieces and checks the bytes and how far the
	// server got ahead of the reader.
	get := func(ctx context.Context, path string, waitFull bool) error {
		res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, path))
		if err != nil {
			return err
		}
		defer res.Body.Close()
		n := counter(path)
		if waitFull {
			// Read only once the server filled the stream window.
			testkit.WaitFor(t, "the server to fill the stream window", func() bool { return n.Load() >= window || ctx.Err() != nil })
		}
		want := pattern(len(path)+int(path[len(path)-1]), sizes[path])
		got := make([]byte, 0, len(want))
		buf := make([]byte, 1000)
		maxAhead := int64(0)
		for {
			k, err := res.Body.Read(buf)
			got = append(got, buf[:k]...)
			if ahead := n.Load() - int64(len(got)); ahead > maxAhead {
				maxAhead = ahead
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: read %d of %d bytes: %w", path, len(got), len(want), err)
			}
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: got %d bytes, want %d, not the bytes sent", path, len(got), len(want))
		}
		// The server's handler keeps up to two 4 KiB chunks of its own
		// beyond what the window lets it send.
		if maxAhead > window+32<<10 {
			return fmt.Errorf("%s: the server got %d bytes ahead of the reader, more than the %d-byte stream window allows", path, maxAhead, window)
		}
		return nil
	}

	t.Run("one stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := get(ctx, "/one", true); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("four streams on one connection", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		errs := make(chan error, 4)
		for i := range 4 {
			go func() { errs <- get(ctx, fmt.Sprintf("/s%d", i), false) }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		wantServerConns(t, srv.opened.Load(), 1, "the streams must share one")
	})
}

// TestH2ClientCloseGivesBackConnectionWindow: a body closed while its
// stream is open must give the connection window back for the data it
// held unread (as x/net's Close does); otherwise every such Close shrinks
// the connection's window for good, and after a few the server can send
// nothing more on the whole connection.
//
// Each round: the server sends 60,000 bytes (within the 64 KiB stream
// window) and holds the stream open; a second request on the same
// connection proves the client has taken those bytes in; the body is
// closed unread. Three rounds hold 180,000 of the 196,607-byte connection
// window unless Close returns it.
func TestH2ClientCloseGivesBackConnectionWindow(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	flushed := make(chan struct{}, 1)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			io.WriteString(w, "ok")
			return
		}
		w.Write(make([]byte, 60000))
		w.(http.Flusher).Flush()
		flushed <- struct{}{}
		<-r.Context().Done()
	}))
	rt := newClients(t, p, Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 128 << 10}).For(srv.addr)
	for i := range 6 {
		res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/big"))
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		select {
		case <-flushed:
		case <-time.After(5 * time.Second):
			res.Body.Close()
			t.Fatalf("round %d: the server could not send 60,000 bytes in 5 s: after %d bodies closed unread, the connection window is used up (Close did not give back their unread bytes)", i, i)
		}
		if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/small")); err != nil {
			t.Fatalf("round %d: /small: %v", i, err)
		}
		res.Body.Close()
	}
	wantServerConns(t, srv.opened.Load(), 1, "")
}

// --- 2, 3. cancellation and Close -----------------------------------

// TestH2ClientCancelWhileStreaming: cancelling the request's context ends
// a streaming body's Read promptly with the context's error and resets
// the stream (the server's handler sees its context end); before the
// answer's HEADERS, RoundTrip itself returns.
func TestH2ClientCancelWhileStreaming(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newWatchServer(t, p, tls.RequireAndVerifyClientCert, 0)
	rt := newClients(t, p, Config{}).For(srv.addr)

	t.Run("body streaming", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/watch"))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || line != `{"type":"ADDED"}`+"\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		serverDone := within(t, 5*time.Second, srv.started, "the handler to start")
		readErr := readAsync(res.Body)
		start := time.Now()
		cancel()
		err = within(t, 2*time.Second, readErr, "Read to return after the context was cancelled")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Read after cancel: %v, want context.Canceled", err)
		}
		within(t, 2*time.Second, serverDone, "the server's handler to see its context end (RST_STREAM)")
		t.Logf("Read returned %v after cancel", time.Since(start).Round(time.Millisecond))
	})

	t.Run("before the answer", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/hang"))
			if err == nil {
				res.Body.Close()
			}
			errc <- err
		}()
		serverDone := within(t, 5*time.Second, srv.started, "the handler to start")
		cancel()
		if err := within(t, 2*time.Second, errc, "RoundTrip to return after the context was cancelled"); !errors.Is(err, context.Canceled) {
			t.Errorf("RoundTrip after cancel: %v, want context.Canceled", err)
		}
		within(t, 2*time.Second, serverDone, "the server's handler to see its context end (RST_STREAM)")
	})

	// The resets did not cost the connection.
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
		t.Fatal(err)
	}
	wantServerConns(t, srv.opened.Load(), 1, "a reset stream must not end its connection")
}

// TestH2ClientCloseResetsStream: closing a body before its end resets the
// stream, so the server's handler sees its context end; Read after Close
// fails; the connection carries on.
func TestH2ClientCloseResetsStream(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newWatchServer(t, p, tls.RequireAndVerifyClientCert, 0)
	rt := newClients(t, p, Config{}).For(srv.addr)

	res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.addr, "/watch"))
	if err != nil {
		t.Fatal(err)
	}
	serverDone := within(t, 5*time.Second, srv.started, "the handler to start")
	if err := res.Body.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	within(t, 2*time.Second, serverDone, "the server's handler to see its context end after Body.Close (RST_STREAM)")
	if n, err := res.Body.Read(make([]byte, 10)); err == nil || n != 0 {
		t.Errorf("Read after Close = %d, %v; want 0 and an error", n, err)
	}
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
		t.Fatal(err)
	}
	wantServerConns(t, srv.opened.Load(), 1, "")
}

// --- 4. GOAWAY -------------------------------------------------------

// TestH2ClientGoAway: a stream above a GOAWAY's last stream ID fails with
// an error Unprocessed recognises (the server did not see it: safe to
// retry; components/transport wraps it in its UnprocessedError); a
// stream the GOAWAY names as received gets its answer. Either way the
// connection takes no new stream: the next request dials.
func TestH2ClientGoAway(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
		switch path {
		case "/below":
			c.fr.WriteGoAway(id-2, http2.ErrCodeNo, nil)
		case "/received":
			c.fr.WriteGoAway(id, http2.ErrCodeNo, nil)
			c.headers(id, false, ":status", "200")
			c.data(id, true, "answered")
		default:
			c.headers(id, false, ":status", "200")
			c.data(id, true, "ok")
		}
	})

	for _, tc := range []struct {
		path     string
		wantBody string // "" wants an error Unprocessed recognises
	}{
		{"/below", ""},
		{"/received", "answered"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			tr := newClients(t, p, Config{})
			rt := tr.For(srv.Addr)
			before := srv.Accepted.Load()
			// Stream 1 is answered normally; the GOAWAY comes on stream 3.
			if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.Addr, "/")); err != nil {
				t.Fatal(err)
			}
			res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.Addr, tc.path))
			if tc.wantBody == "" {
				if err == nil {
					res.Body.Close()
					t.Fatal("RoundTrip succeeded on a stream the GOAWAY left unprocessed")
				}
				if !Unprocessed(err) || !errors.Is(err, ErrStreamGoneAway) {
					t.Fatalf("error %q (%T) is not ErrStreamGoneAway: the proxy would not retry a request the server never saw", err, err)
				}
			} else {
				if err != nil {
					t.Fatalf("RoundTrip on a stream the GOAWAY named as received: %v", err)
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || string(b) != tc.wantBody {
					t.Fatalf("body %q, %v; want %q", b, err, tc.wantBody)
				}
			}
			testkit.WaitFor(t, "the gone-away connection to close", func() bool { return tr.open(srv.Addr) == 0 })
			if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.Addr, "/")); err != nil {
				t.Fatalf("request after the GOAWAY: %v", err)
			}
			tr.wantDialed(t, srv.Addr, 2, "the request after the GOAWAY must use a new connection")
			wantServerConns(t, srv.Accepted.Load()-before, 2, "")
		})
	}
}

// --- 5. MAX_CONCURRENT_STREAMS ---------------------------------------

// TestH2ClientMaxConcurrentStreamsOpensConnections: with the server's
// SETTINGS_MAX_CONCURRENT_STREAMS at 1, a second request while the first
// is held open goes to a second connection, and both are answered.
func TestH2ClientMaxConcurrentStreamsOpensConnections(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newWatchServer(t, p, tls.RequireAndVerifyClientCert, 1)
	tr := newClients(t, p, Config{})
	rt := tr.For(srv.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var bodies []io.ReadCloser
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	for i := range 2 {
		res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/watch"))
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		bodies = append(bodies, res.Body)
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("watch %d: %d %q %v", i, res.StatusCode, line, err)
		}
		within(t, 5*time.Second, srv.started, "the handler to start")
	}
	if n := srv.running.Load(); n != 2 {
		t.Errorf("%d handlers running, want 2", n)
	}
	wantServerConns(t, srv.opened.Load(), 2, "one stream each")
	tr.wantDialed(t, srv.addr, 2, "")
}

// --- 6. trailers -----------------------------------------------------

// TestH2ClientTrailers: after the body's EOF, res.Trailer holds the
// declared trailer the server sent, and one sent with http.TrailerPrefix.
func TestH2ClientTrailers(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "some body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "abc123")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	}))
	// (What res.Trailer holds before EOF is TestH2ClientTrailersFilledOnlyAtEOF's.)
	res, b, err := getBody(t, newClients(t, p, Config{}).For(srv.addr), srv.addr, "/")
	if err != nil || string(b) != "some body" {
		t.Fatalf("body %q, %v", b, err)
	}
	if got := res.Trailer.Get("X-Checksum"); got != "abc123" {
		t.Errorf("Trailer X-Checksum = %q, want abc123 (trailers: %v)", got, res.Trailer)
	}
	if got := res.Trailer.Get("X-Late"); got != "late" {
		t.Errorf("Trailer X-Late = %q, want late (trailers: %v)", got, res.Trailer)
	}
	if res.Header.Get("X-Checksum") != "" {
		t.Errorf("the trailer leaked into Header: %v", res.Header)
	}
}

// TestH2ClientTrailersFilledOnlyAtEOF: res.Trailer may change only inside
// a Body.Read that returns io.EOF (net/http: "Trailer must not be
// accessed concurrently with Read calls on the Body. After Body.Read has
// returned io.EOF, Trailer will contain any trailer values"; x/net
// copies its trailers in then). If the connection's reading goroutine
// writes the map when the trailers arrive, a caller that looks at
// res.Trailer between Reads, as httputil.ReverseProxy does when it
// announces the trailers before copying the body, races with it (a data
// race, or a fatal concurrent map iteration and map write).
//
// The script answers with HEADERS (declaring X-Checksum), DATA, and the
// trailers; a second request on the connection, answered after them,
// proves the client read them. The body is not read yet, so the trailer's
// value must not be there.
func TestH2ClientTrailersFilledOnlyAtEOF(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
		if path == "/trailers" {
			c.headers(id, false, ":status", "200", "trailer", "X-Checksum")
			c.data(id, false, "body")
			c.headers(id, true, "x-checksum", "abc")
			return
		}
		c.headers(id, false, ":status", "200")
		c.data(id, true, "ok")
	})
	rt := newClients(t, p, Config{}).For(srv.Addr)
	res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), srv.Addr, "/trailers"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.Addr, "/")); err != nil {
		t.Fatal(err)
	}
	if v, ok := res.Trailer["X-Checksum"]; !ok || v != nil {
		t.Errorf("before any Read, Trailer[X-Checksum] = %q (present %v), want declared with a nil value: "+
			"the reading goroutine wrote res.Trailer outside Body.Read", v, ok)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil || string(b) != "body" {
		t.Fatalf("body %q, %v", b, err)
	}
	if got := res.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("after EOF, Trailer X-Checksum = %q, want abc", got)
	}
}

// --- 7. gzip ---------------------------------------------------------

// TestH2ClientTransparentGzip: a request that set no Accept-Encoding asks
// for gzip on the caller's behalf and gets the answer decompressed; a
// request that asked for gzip itself gets the compressed bytes.
func TestH2ClientTransparentGzip(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	plain := bytes.Repeat([]byte(`{"kind":"ConfigMap","metadata":{"name":"x"}}`+"\n"), 200)
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(plain)
	zw.Close()
	compressed := zbuf.Bytes()
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ae := r.Header.Get("Accept-Encoding")
		w.Header().Set("X-Accept-Encoding", ae)
		if strings.Contains(ae, "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(compressed)))
			w.Write(compressed)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(plain)))
		w.Write(plain)
	}))
	rt := newClients(t, p, Config{}).For(srv.addr)

	get := func(t *testing.T, hdr map[string]string) (*http.Response, []byte) {
		req := testkit.NewRequest(t, context.Background(), srv.addr, "/")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("reading the body: %v", err)
		}
		if err := res.Body.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		return res, b
	}

	t.Run("no Accept-Encoding", func(t *testing.T) {
		res, b := get(t, nil)
		if got := res.Header.Get("X-Accept-Encoding"); got != "gzip" {
			t.Errorf("the server saw Accept-Encoding %q, want gzip", got)
		}
		if !bytes.Equal(b, plain) {
			t.Errorf("body: %d bytes, not the %d decompressed bytes", len(b), len(plain))
		}
		if !res.Uncompressed {
			t.Error("Uncompressed = false, want true")
		}
		if ce := res.Header.Get("Content-Encoding"); ce != "" {
			t.Errorf("Content-Encoding %q, want none", ce)
		}
		if res.ContentLength != -1 || res.Header.Get("Content-Length") != "" {
			t.Errorf("ContentLength %d, header %q; want -1 and none (the compressed length does not apply)", res.ContentLength, res.Header.Get("Content-Length"))
		}
	})
	t.Run("Accept-Encoding gzip", func(t *testing.T) {
		res, b := get(t, map[string]string{"Accept-Encoding": "gzip"})
		if !bytes.Equal(b, compressed) {
			t.Errorf("body: %d bytes, not the %d compressed bytes untouched", len(b), len(compressed))
		}
		if res.Uncompressed {
			t.Error("Uncompressed = true, want false")
		}
		if ce := res.Header.Get("Content-Encoding"); ce != "gzip" {
			t.Errorf("Content-Encoding %q, want gzip", ce)
		}
		if res.ContentLength != int64(len(compressed)) {
			t.Errorf("ContentLength %d, want %d", res.ContentLength, len(compressed))
		}
	})
	t.Run("Range", func(t *testing.T) {
		res, b := get(t, map[string]string{"Range": "bytes=0-"})
		if got := res.Header.Get("X-Accept-Encoding"); got != "" {
			t.Errorf("the server saw Accept-Encoding %q on a Range request, want none", got)
		}
		if !bytes.Equal(b, plain) || res.Uncompressed {
			t.Errorf("body %d bytes, Uncompressed %v; want the %d plain bytes", len(b), res.Uncompressed, len(plain))
		}
	})
}

// --- 8. informational answers ---------------------------------------

// TestH2ClientSkipsInformationalAnswers: 103 Early Hints and 100 Continue
// before the final answer are skipped; the final status, headers and
// body arrive.
func TestH2ClientSkipsInformationalAnswers(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
		c.headers(id, false, ":status", "103", "link", "</style.css>; rel=preload")
		c.headers(id, false, ":status", "100")
		c.headers(id, false, ":status", "200", "content-type", "text/plain")
		c.data(id, true, "final")
	})
	res, b, err := getBody(t, newClients(t, p, Config{}).For(srv.Addr), srv.Addr, "/")
	if res.StatusCode != 200 || err != nil || string(b) != "final" {
		t.Fatalf("got %d %q, %v; want 200 \"final\"", res.StatusCode, b, err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/plain" {
		t.Errorf("Content-Type %q, want the final answer's text/plain", ct)
	}
	if l := res.Header.Get("Link"); l != "" {
		t.Errorf("the 103's Link %q leaked into the final answer's headers", l)
	}
}

// --- 9, 10. health and idle ------------------------------------------

// TestH2ClientHealthCheck: a connection that goes silent (frozen: the
// peer answers nothing) is closed after ReadIdleTimeout + PingTimeout,
// with or without a stream on it; a silent connection whose PINGs are
// answered stays.
func TestH2ClientHealthCheck(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	cfg := Config{ReadIdleTimeout: 200 * time.Millisecond, PingTimeout: time.Second}

	t.Run("frozen with a watch", func(t *testing.T) {
		srv := newWatchServer(t, p, tls.RequireAndVerifyClientCert, 0)
		proxy := testkit.NewFreezeProxy(t, srv.addr)
		tr := newClients(t, p, cfg)
		rt := tr.For(proxy.Addr)
		res, err := rt.RoundTrip(testkit.NewRequest(t, context.Background(), proxy.Addr, "/watch"))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		within(t, 5*time.Second, srv.started, "the handler to start")
		readErr := readAsync(res.Body)
		proxy.Freeze()
		frozen := time.Now()
		if err := within(t, 10*time.Second, readErr, "the watch on the frozen connection to fail"); err == nil {
			t.Fatal("the watch ended cleanly on a dead connection, want an error")
		}
		t.Logf("the watch failed %v after the freeze", time.Since(frozen).Round(time.Millisecond))
		testkit.WaitFor(t, "the frozen connection to be closed", func() bool { return tr.open(proxy.Addr) == 0 })
		if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), proxy.Addr, "/")); err != nil {
			t.Fatalf("request after the dead connection: %v", err)
		}
		tr.wantDialed(t, proxy.Addr, 2, "")
	})

	t.Run("frozen idle", func(t *testing.T) {
		srv := newWatchServer(t, p, tls.RequireAndVerifyClientCert, 0)
		proxy := testkit.NewFreezeProxy(t, srv.addr)
		tr := newClients(t, p, cfg)
		if _, err := testkit.RoundTrip(tr.For(proxy.Addr), testkit.NewRequest(t, context.Background(), proxy.Addr, "/")); err != nil {
			t.Fatal(err)
		}
		proxy.Freeze()
		testkit.WaitFor(t, "the frozen idle connection to be closed", func() bool { return tr.open(proxy.Addr) == 0 })
	})

	t.Run("silent but answering PINGs", func(t *testing.T) {
		srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
			c.headers(id, false, ":status", "200") // and nothing more: a quiet watch
		})
		// PINGs every 200 ms or so; an unanswered one would close the
		// connection 2 s after it went out (long enough that a loaded
		// machine's late answer still counts).
		cfg := Config{ReadIdleTimeout: 100 * time.Millisecond, PingTimeout: 2 * time.Second}
		tr := newClients(t, p, cfg)
		res, err := tr.For(srv.Addr).RoundTrip(testkit.NewRequest(t, context.Background(), srv.Addr, "/watch"))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		readErr := readAsync(res.Body)
		// A PING goes out only on a connection that survived the one
		// before: were the answers not taken for life, the connection
		// would have closed before the third.
		testkit.WaitFor(t, "three PINGs", func() bool { return srv.pings.Load() >= 3 || len(readErr) > 0 })
		select {
		case err := <-readErr:
			t.Fatalf("the watch on a connection that answers PINGs ended: %v", err)
		default:
		}
		if g := tr.open(srv.Addr); g != 1 {
			t.Errorf("open connections = %v, want 1", g)
		}
	})
}

// TestH2ClientSilenceBoundWhateverThePhase: a busy connection that falls
// silent is closed within 1.2 × ReadIdleTimeout + PingTimeout of the last
// frame it read, whatever the phase of its timer at that moment. Eight
// connections fall silent at phases an eighth of ReadIdleTimeout apart;
// a check every ReadIdleTimeout (not every fifth of it) lets one of them
// run up to 2 × ReadIdleTimeout + PingTimeout, which is how a write in
// flight on a cut host once took 12.9 s to fail (TestResilience's
// network cut wants at most 10 s).
func TestH2ClientSilenceBoundWhateverThePhase(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	const (
		readIdle = 1500 * time.Millisecond
		ping     = 500 * time.Millisecond
		conns    = 8
		// slack covers timer and scheduling delays on a loaded machine;
		// the bad phase of a ReadIdleTimeout period overshoots the bound
		// by more than twice as much.
		slack = 400 * time.Millisecond
	)
	bound := readIdle*6/5 + ping + slack
	// A line every 20 ms until the request ends: the connection is
	// never silent on its own.
	srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			io.WriteString(w, "{}\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}))
	type result struct {
		silence time.Duration // from the last byte read to the error
		err     error
	}
	results := make(chan result, conns)
	start := time.Now()
	for i := range conns {
		proxy := testkit.NewFreezeProxy(t, srv.addr)
		tr := newClients(t, p, Config{ReadIdleTimeout: readIdle, PingTimeout: ping})
		res, err := tr.For(proxy.Addr).RoundTrip(testkit.NewRequest(t, context.Background(), proxy.Addr, "/watch"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		go func() {
			buf := make([]byte, 512)
			var last time.Time
			for {
				n, err := res.Body.Read(buf)
				if n > 0 {
					last = time.Now()
				}
				if err != nil {
					results <- result{time.Since(last), err}
					return
				}
			}
		}()
		// Freeze connection i at phase i/conns of a ReadIdleTimeout,
		// one period and more after the first connection was made.
		at := start.Add(readIdle + readIdle*time.Duration(i)/conns)
		time.AfterFunc(time.Until(at), proxy.Freeze)
	}
	var worst time.Duration
	for range conns {
		r := within(t, 10*readIdle, results, "a frozen connection to fail")
		if r.err == nil || r.err == io.EOF {
			t.Fatalf("a stream on a frozen connection ended cleanly (%v), want an error", r.err)
		}
		worst = max(worst, r.silence)
	}
	t.Logf("longest from the last frame read to the error: %v (bound %v)", worst.Round(time.Millisecond), bound)
	if worst > bound {
		t.Errorf("a silent connection failed %v after its last frame, want at most 1.2 × ReadIdleTimeout + PingTimeout (+ %v slack) = %v",
			worst.Round(time.Millisecond), slack, bound)
	}
}

// TestH2ClientIdleConnTimeout: a connection that carries no stream for
// IdleConnTimeout is closed; one carrying a (silent) watch is not.
func TestH2ClientIdleConnTimeout(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	lines := make(chan string)
	srv := newH2Server(t, p, tls.VerifyClientCertIfGiven, 0, streamingHandler(lines))
	tr := newClients(t, p, Config{IdleConnTimeout: 150 * time.Millisecond})
	busy := tr.For(srv.addr) // holds a watch
	idleTr := newClients(t, p, Config{IdleConnTimeout: 150 * time.Millisecond})
	idle := idleTr.For(srv.addr) // its own pool, so its own connection

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := busy.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	watch := bufio.NewReader(res.Body)

	// Twice: an idle connection closes, after at least two idle timeouts
	// in all during which the watch's connection was busy.
	for i := range 2 {
		if _, err := testkit.RoundTrip(idle, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
			t.Fatal(err)
		}
		if g := idleTr.open(srv.addr); g != 1 {
			t.Fatalf("round %d: open connections = %v, want 1", i, g)
		}
		testkit.WaitFor(t, "the idle connection to be closed", func() bool { return idleTr.open(srv.addr) == 0 })
	}
	if g := tr.open(srv.addr); g != 1 {
		t.Fatalf("the watch's open connections = %v, want 1: a connection carrying a stream is not idle", g)
	}
	select {
	case lines <- "event":
	case <-time.After(5 * time.Second):
		t.Fatal("the watch's handler is gone: its connection was closed as idle")
	}
	if l, err := watch.ReadString('\n'); err != nil || l != "event\n" {
		t.Errorf("the watch after the idle timeouts: %q, %v", l, err)
	}
	tr.wantDialed(t, srv.addr, 1, "the watch's connection was closed")
}

// --- 11. large header block ------------------------------------------

// TestH2ClientLargeHeaderBlock: a header block larger than the server's
// SETTINGS_MAX_FRAME_SIZE (16 KiB, the minimum; net/http's server
// advertises 1 MiB unless told otherwise) goes out as HEADERS and
// CONTINUATION frames and arrives whole: a frame over 16 KiB would be a
// FRAME_SIZE_ERROR.
func TestH2ClientLargeHeaderBlock(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := testkit.NewAPIServer(t, p.CA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256([]byte(r.Header.Get("X-Big")))
		w.Header().Set("X-Big-Sum", hex.EncodeToString(sum[:]))
		io.WriteString(w, "ok")
	}), testkit.WithNames(serverName), testkit.WithClientAuth(tls.RequireAndVerifyClientCert),
		testkit.WithHTTP2(&http.HTTP2Config{MaxReadFrameSize: 16 << 10}))
	addr := srv.Addr()
	rt := newClients(t, p, Config{}).For(addr)
	// 40 KiB of random hex: about 27 KiB even Huffman-coded.
	big := hex.EncodeToString(pattern(7, 20<<10))
	sum := sha256.Sum256([]byte(big))
	for i := range 2 {
		req := testkit.NewRequest(t, context.Background(), addr, "/")
		req.Header.Set("X-Big", big)
		res, err := testkit.RoundTrip(rt, req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, res.StatusCode)
		}
		if got := res.Header.Get("X-Big-Sum"); got != hex.EncodeToString(sum[:]) {
			t.Fatalf("request %d: the server got a different X-Big (sum %s)", i, got)
		}
	}
	wantServerConns(t, srv.Opened.Load(), 1, "")
}

// --- 12. no goroutine per stream -------------------------------------

// TestH2ClientNoGoroutinePerStream: streams held open through fanout's
// client add no client goroutine: the growth is the server's handlers
// only. x/net's client, measured the same way on the same server, holds
// one goroutine per stream more.
func TestH2ClientNoGoroutinePerStream(t *testing.T) {
	const n = 50
	p := testkit.NewPKI(t, serverName)
	srv := newWatchServer(t, p, tls.RequireAndVerifyClientCert, 0)
	tr := newClients(t, p, Config{})
	fanout := tr.For(srv.addr)
	xnet := &http2.Transport{TLSClientConfig: &tls.Config{
		RootCAs: p.CA.Pool, ServerName: serverName, Certificates: []tls.Certificate{p.Alice.TLS},
	}}
	defer xnet.CloseIdleConnections()

	// measure opens n watches through rt on an open connection and
	// returns how many goroutines that added.
	measure := func(name string, rt http.RoundTripper) int {
		if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		base := settledGoroutines()
		ctx, cancel := context.WithCancel(context.Background())
		var bodies []io.ReadCloser
		defer func() {
			cancel()
			for _, b := range bodies {
				b.Close()
			}
			testkit.WaitFor(t, "the handlers to end", func() bool { return srv.running.Load() == 0 })
		}()
		for i := range n {
			res, err := rt.RoundTrip(testkit.NewRequest(t, ctx, srv.addr, "/watch"))
			if err != nil {
				t.Fatalf("%s: watch %d: %v", name, i, err)
			}
			bodies = append(bodies, res.Body)
		}
		testkit.WaitFor(t, "the handlers to run", func() bool { return srv.running.Load() == n })
		for range n {
			<-srv.started
		}
		return settledGoroutines() - base
	}

	own := measure("fanout", fanout)
	ref := measure("x/net", xnet)
	t.Logf("%d open streams added %d goroutines through fanout's client, %d through x/net's (the server's handlers: %d)", n, own, ref, n)
	if own > n+5 {
		t.Errorf("%d open streams added %d goroutines through fanout's client: %d beyond the server's %d handlers, want none per stream", n, own, own-n, n)
	}
	if ref-own < n {
		t.Errorf("fanout's client held %d goroutines for %d streams, x/net's %d: want at least %d fewer", own, n, ref, n)
	}
}

// --- bugs and edge cases found while testing -------------------------

// TestH2ClientInvalidHeaderKeepsConnectionUsable: a request refused for
// an invalid header value writes nothing, so it must leave the
// connection's HPACK state as it was. If :authority and :path went into
// the encoder's dynamic table before the bad value was found, the next
// request refers to table entries the server never got, and the server
// ends the connection with COMPRESSION_ERROR (x/net checks every field
// before encoding any).
func TestH2ClientInvalidHeaderKeepsConnectionUsable(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())
	rt := newClients(t, p, Config{}).For(srv.addr)
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/warm")); err != nil {
		t.Fatal(err)
	}

	bad := testkit.NewRequest(t, context.Background(), srv.addr, "/api/v1/pods")
	bad.Header.Set("X-Bad", "line\nbreak")
	if _, err := testkit.RoundTrip(rt, bad); err == nil {
		t.Fatal("a request with a newline in a header value was sent")
	}
	for i := range 2 {
		res, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/api/v1/pods"))
		if err != nil {
			t.Fatalf("request %d after the refused one: %v", i, err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("request %d after the refused one: status %d", i, res.StatusCode)
		}
	}
	wantServerConns(t, srv.opened.Load(), 1, "the refused request cost the connection")
}

// TestH2ClientBodyLengthMismatch: a body that ends before its
// Content-Length must not read as a clean io.EOF (x/net returns
// io.ErrUnexpectedEOF), and one that runs past it must fail: a truncated
// answer relayed as complete is a corrupt one.
func TestH2ClientBodyLengthMismatch(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	// Each path's answer is "hello" with the Content-Length it names.
	lengths := map[string]string{"/short": "10", "/long": "2"}
	srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
		c.headers(id, false, ":status", "200", "content-length", lengths[path])
		c.data(id, true, "hello")
	})
	rt := newClients(t, p, Config{}).For(srv.Addr)
	for _, path := range []string{"/short", "/long"} {
		t.Run(path, func(t *testing.T) {
			req := testkit.NewRequest(t, context.Background(), srv.Addr, path)
			req.Header.Set("Accept-Encoding", "identity")
			res, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			if err == nil {
				t.Errorf("read %q with Content-Length %d and no error, want one", b, res.ContentLength)
			}
			if path == "/short" && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}
