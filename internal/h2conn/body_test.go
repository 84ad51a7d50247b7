//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package; these tests use its Framer to script a server.

package h2conn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// Tests of the request bodies fanout's HTTP/2 client sends (writeBody in
// body.go): flow control within the server's windows, END_STREAM
// after the body, a reset when the body cannot be read, and the writer
// stopping when the server answers before the body is sent.

// --- helpers ---------------------------------------------------------

// probeBody is a request body that counts the bytes read from it and
// reports its Close on closed.
type probeBody struct {
	r       io.Reader
	read    atomic.Int64
	closed  chan struct{}
	once    sync.Once
	onClose func() // if set, run by the first Close
}

func newProbeBody(r io.Reader) *probeBody { return &probeBody{r: r, closed: make(chan struct{})} }

func (b *probeBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *probeBody) Close() error {
	b.once.Do(func() {
		if b.onClose != nil {
			b.onClose()
		}
		close(b.closed)
	})
	return nil
}

// chunkReader hands out b at most max bytes at a time and returns io.EOF
// with the last bytes, as many readers do (bytes.Reader returns it on a
// read of its own).
type chunkReader struct {
	b   []byte
	max int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), r.max)], r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// failingReader returns b, then err.
type failingReader struct {
	b   []byte
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// bodyRequest is a request to path with body sent as is: length is its
// ContentLength (-1 unknown).
func bodyRequest(t *testing.T, ctx context.Context, method, addr, path string, body io.ReadCloser, length int64) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = body
	req.ContentLength = length
	return req
}

func sumHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// bodyServer is a Go HTTP/2 server. /sum reads the whole body and
// answers its sha256 (X-Sum), its length (X-Got), and the request's
// ContentLength (X-Content-Length) and Content-Length header
// (X-Content-Length-Header, "absent" if none); a failed body read goes
// to readErrs and is answered 500 (which a reset stream never gets).
// /reject answers 413 without reading the body. Anything else is
// answered "ok".
type bodyServer struct {
	*h2Server
	readErrs chan error
}

func newBodyServer(t *testing.T, p *testkit.PKI) *bodyServer {
	t.Helper()
	s := &bodyServer{readErrs: make(chan error, 10)}
	s.h2Server = newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sum":
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				select {
				case s.readErrs <- err:
				default:
				}
				http.Error(w, fmt.Sprintf("reading the body after %d bytes: %v", n, err), http.StatusInternalServerError)
				return
			}
			w.Header().Set("X-Sum", hex.EncodeToString(h.Sum(nil)))
			w.Header().Set("X-Got", strconv.FormatInt(n, 10))
			w.Header().Set("X-Content-Length", strconv.FormatInt(r.ContentLength, 10))
			cl := "absent"
			if vv, ok := r.Header["Content-Length"]; ok {
				cl = strings.Join(vv, ",")
			}
			w.Header().Set("X-Content-Length-Header", cl)
			io.WriteString(w, "ok")
		case "/reject":
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			io.WriteString(w, "too large")
		default:
			io.WriteString(w, "ok")
		}
	}))
	return s
}

// postSum POSTs body to /sum and checks the answer against want: the
// digest, and that the server saw ContentLength wantCL.
func postSum(t *testing.T, rt http.RoundTripper, addr string, body io.ReadCloser, length int64, want []byte, wantCL int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := rt.RoundTrip(bodyRequest(t, ctx, http.MethodPost, addr, "/sum", body, length))
	if err != nil {
		return fmt.Errorf("POST of %d bytes: %w", len(want), err)
	}
	msg, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return fmt.Errorf("POST of %d bytes: reading the answer: %w", len(want), err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("POST of %d bytes: status %d: %s", len(want), res.StatusCode, bytes.TrimSpace(msg))
	}
	if got := res.Header.Get("X-Got"); got != strconv.Itoa(len(want)) {
		return fmt.Errorf("the server read %s bytes, want %d", got, len(want))
	}
	if got := res.Header.Get("X-Sum"); got != sumHex(want) {
		return fmt.Errorf("the server read %d bytes with sha256 %s, want %s: not the bytes sent", len(want), got, sumHex(want))
	}
	if got := res.Header.Get("X-Content-Length"); got != strconv.FormatInt(wantCL, 10) {
		return fmt.Errorf("the server saw ContentLength %s, want %d", got, wantCL)
	}
	return nil
}

// --- 1. a large body, known and unknown length -----------------------

// TestH2ClientBodyLarge: a 3 MiB body (many times the 65,535-byte
// initial windows and net/http's 1 MiB ones, so it needs the server's
// WINDOW_UPDATEs) reaches the server whole, with Content-Length when the
// length is known and without when it is not.
func TestH2ClientBodyLarge(t *testing.T) {
	const size = 3 << 20
	p := testkit.NewPKI(t, serverName)
	srv := newBodyServer(t, p)
	rt := newClients(t, p, Config{}).For(srv.addr)

	t.Run("known length", func(t *testing.T) {
		b := pattern(1, size)
		body := newProbeBody(bytes.NewReader(b))
		if err := postSum(t, rt, srv.addr, body, size, b, size); err != nil {
			t.Fatal(err)
		}
		within(t, 5*time.Second, body.closed, "the request body to be closed")
	})
	t.Run("unknown length", func(t *testing.T) {
		b := pattern(2, size)
		// Reads of 10,000 bytes, never a multiple of a frame; io.EOF
		// comes with the last ones.
		body := newProbeBody(&chunkReader{b: b, max: 10000})
		if err := postSum(t, rt, srv.addr, body, -1, b, -1); err != nil {
			t.Fatal(err)
		}
		within(t, 5*time.Second, body.closed, "the request body to be closed")
	})
	wantServerConns(t, srv.opened.Load(), 1, "")
}

// --- 2. concurrent bodies on one connection --------------------------

// TestH2ClientBodyConcurrent: four 3 MiB bodies sent at once share one
// connection (and its connection window) and all arrive whole.
func TestH2ClientBodyConcurrent(t *testing.T) {
	const size, n = 3 << 20, 4
	p := testkit.NewPKI(t, serverName)
	srv := newBodyServer(t, p)
	tr := newClients(t, p, Config{})
	rt := tr.For(srv.addr)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			b := pattern(10+i, size)
			length := int64(size)
			var r io.Reader = bytes.NewReader(b)
			if i%2 == 1 {
				length, r = -1, &chunkReader{b: b, max: 7000}
			}
			if err := postSum(t, rt, srv.addr, newProbeBody(r), length, b, length); err != nil {
				errs <- fmt.Errorf("body %d: %w", i, err)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	tr.wantDialed(t, srv.addr, 1, "the bodies must share one connection")
	wantServerConns(t, srv.opened.Load(), 1, "")
}

// --- 3. a body that fails --------------------------------------------

// TestH2ClientBodyReadError: a body whose Read fails after 100,000 bytes
// fails the request with that error, resets the stream (the server's
// handler sees its body read fail rather than a short body that ends
// cleanly: the length is unknown, so only the reset tells), and leaves the
// connection usable.
func TestH2ClientBodyReadError(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newBodyServer(t, p)
	tr := newClients(t, p, Config{})
	rt := tr.For(srv.addr)
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
		t.Fatal(err)
	}

	body := newProbeBody(&failingReader{b: pattern(3, 100000), err: errTest})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := testkit.RoundTrip(rt, bodyRequest(t, ctx, http.MethodPost, srv.addr, "/sum", body, -1))
	if err == nil {
		t.Fatalf("a request whose body failed got %d (X-Got %s) and no error", res.StatusCode, res.Header.Get("X-Got"))
	}
	if !errors.Is(err, errTest) {
		t.Errorf("error %v, want the body's read error", err)
	}
	if err := within(t, 5*time.Second, srv.readErrs, "the server's handler to see its body read fail (RST_STREAM)"); err == nil {
		t.Error("the handler's body read failed with a nil error")
	}
	within(t, 5*time.Second, body.closed, "the request body to be closed")

	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
		t.Fatalf("request after the failed body: %v", err)
	}
	tr.wantDialed(t, srv.addr, 1, "a failed body must not cost the connection")
	wantServerConns(t, srv.opened.Load(), 1, "")
}

// --- 4. an answer before the body is sent ----------------------------

// TestH2ClientBodyEarlyAnswer: a server that answers 413 in full without
// reading an 8 MiB body: the client gets the 413, its body writer stops
// (it closes the body, having read no more than the server's windows let
// it send) and tells the server with RST_STREAM CANCEL that the rest will
// not come.
func TestH2ClientBodyEarlyAnswer(t *testing.T) {
	const size = 8 << 20
	p := testkit.NewPKI(t, serverName)

	t.Run("net/http server", func(t *testing.T) {
		srv := newBodyServer(t, p)
		tr := newClients(t, p, Config{})
		rt := tr.For(srv.addr)
		for i := range 2 {
			body := newProbeBody(bytes.NewReader(make([]byte, size)))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			res, err := rt.RoundTrip(bodyRequest(t, ctx, http.MethodPost, srv.addr, "/reject", body, size))
			if err != nil {
				cancel()
				t.Fatalf("request %d: %v", i, err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			cancel()
			if res.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large" || err != nil {
				t.Fatalf("request %d: %d %q %v, want 413 \"too large\"", i, res.StatusCode, b, err)
			}
			within(t, 5*time.Second, body.closed, "the request body to be closed after the early answer (the body writer to end)")
			// net/http grants 1 MiB per stream: the writer must have
			// stopped long before the end.
			if n := body.read.Load(); n >= size {
				t.Errorf("request %d: the writer read all %d bytes of the body after the server had answered", i, n)
			}
		}
		if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.addr, "/")); err != nil {
			t.Fatalf("request after the early answers: %v", err)
		}
		wantServerConns(t, srv.opened.Load(), 1, "")
	})

	t.Run("RST_STREAM CANCEL", func(t *testing.T) {
		// The script grants no window beyond the initial 65,535 bytes,
		// answers at once, then reads until the client resets the
		// stream.
		rst := make(chan http2.ErrCode, 1)
		srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
			c.headers(id, true, ":status", "413", "content-length", "0")
			for {
				f, err := c.nextFrame()
				if err != nil {
					return
				}
				if f, ok := f.(*http2.RSTStreamFrame); ok && f.StreamID == id {
					rst <- f.ErrCode
					return
				}
			}
		})
		tr := newClients(t, p, Config{})
		body := newProbeBody(bytes.NewReader(make([]byte, size)))
		res, err := testkit.RoundTrip(tr.For(srv.Addr), bodyRequest(t, context.Background(), http.MethodPost, srv.Addr, "/", body, size))
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", res.StatusCode)
		}
		if code := within(t, 5*time.Second, rst, "RST_STREAM from the client after the early answer"); code != http2.ErrCodeCancel {
			t.Errorf("RST_STREAM %v, want CANCEL", code)
		}
		within(t, 5*time.Second, body.closed, "the request body to be closed")
		if n := body.read.Load(); n >= size {
			t.Errorf("the writer read all %d bytes of the body, past the server's window", n)
		}
	})
}

// --- 5. an empty body ------------------------------------------------

// TestH2ClientBodyEmpty: a PUT with http.NoBody (or no body) and
// ContentLength 0 says Content-Length: 0, as x/net does, so the server
// need not wait for a body.
func TestH2ClientBodyEmpty(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newBodyServer(t, p)
	rt := newClients(t, p, Config{}).For(srv.addr)
	for _, tc := range []struct {
		name string
		body io.ReadCloser
	}{
		{"NoBody", http.NoBody},
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := testkit.RoundTrip(rt, bodyRequest(t, ctx, http.MethodPut, srv.addr, "/sum", tc.body, 0))
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			if got := res.Header.Get("X-Content-Length"); got != "0" {
				t.Errorf("the server saw ContentLength %s, want 0", got)
			}
			if got := res.Header.Get("X-Content-Length-Header"); got != "0" {
				t.Errorf("the server saw Content-Length header %q, want \"0\"", got)
			}
			if got := res.Header.Get("X-Got"); got != "0" {
				t.Errorf("the server read %s bytes, want 0", got)
			}
		})
	}
}

// --- 6. small windows ------------------------------------------------

// windowScript serves, on a scriptH2, /settings: SETTINGS_INITIAL_WINDOW_SIZE
// initial, then an empty 200; and /upload: it reads the body checking
// every DATA frame against the stream and connection windows it granted,
// which it grows by streamGrant and connGrant only when they are used up,
// and answers 200 once the body ended. The result goes to results.
type windowScript struct {
	initial, streamGrant, connGrant uint32
	results                         chan windowResult
	// connWindow is what the client may still send on the connection
	// (one connection only); the connection's goroutine owns it.
	connWindow int
}

type windowResult struct {
	body                       []byte
	frames                     int
	streamUpdates, connUpdates int
	violations                 []string
}

func (w *windowScript) serve(c *scriptConn, id uint32, path string) {
	switch path {
	case "/settings":
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: w.initial})
		c.headers(id, true, ":status", "200")
		return
	case "/upload":
	default:
		c.headers(id, true, ":status", "404")
		return
	}
	var r windowResult
	sw, cw := int(w.initial), &w.connWindow
	for {
		f, err := c.nextFrame()
		if err != nil {
			r.violations = append(r.violations, fmt.Sprintf("connection lost: %v", err))
			w.results <- r
			return
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			n := int(f.Length)
			if n > sw || n > *cw {
				r.violations = append(r.violations, fmt.Sprintf("DATA frame %d of %d bytes at offset %d; the stream window was %d, the connection window %d",
					r.frames, n, len(r.body), sw, *cw))
			}
			sw -= n
			*cw -= n
			r.frames++
			r.body = append(r.body, f.Data()...)
			if f.StreamEnded() {
				c.headers(id, true, ":status", "200")
				w.results <- r
				return
			}
			if sw <= 0 {
				c.fr.WriteWindowUpdate(id, w.streamGrant)
				sw += int(w.streamGrant)
				r.streamUpdates++
			}
			if *cw <= 0 {
				c.fr.WriteWindowUpdate(0, w.connGrant)
				*cw += int(w.connGrant)
				r.connUpdates++
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				r.violations = append(r.violations, fmt.Sprintf("the client reset the stream: %v", f.ErrCode))
				w.results <- r
				return
			}
		}
	}
}

// TestH2ClientBodySmallWindows: with SETTINGS_INITIAL_WINDOW_SIZE at
// 1,000 and windows granted 777 bytes at a time on the stream and 3,000
// on the connection (both of which therefore bind: the stream's first,
// the connection's once its initial 65,535 bytes are used), a 100,000-byte
// body arrives whole and no DATA frame ever exceeds a window.
func TestH2ClientBodySmallWindows(t *testing.T) {
	const size = 100000
	p := testkit.NewPKI(t, serverName)
	ws := &windowScript{initial: 1000, streamGrant: 777, connGrant: 3000, results: make(chan windowResult, 1), connWindow: InitialWindow}
	srv := newScriptH2(t, p, ws.serve)
	rt := newClients(t, p, Config{}).For(srv.Addr)
	// The answer follows the SETTINGS on the wire: once it is here, the
	// client applied them.
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.Addr, "/settings")); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name   string
		r      func(b []byte) io.Reader
		length int64
	}{
		{"known length", func(b []byte) io.Reader { return bytes.NewReader(b) }, size},
		{"unknown length", func(b []byte) io.Reader { return &chunkReader{b: b, max: 5000} }, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := pattern(20+i, size)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := testkit.RoundTrip(rt, bodyRequest(t, ctx, http.MethodPost, srv.Addr, "/upload", newProbeBody(tc.r(b)), tc.length))
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			r := within(t, 5*time.Second, ws.results, "the script's result")
			for i, v := range r.violations {
				if i == 5 {
					t.Errorf("... %d violations in all", len(r.violations))
					break
				}
				t.Error(v)
			}
			if !bytes.Equal(r.body, b) {
				t.Errorf("the server got %d bytes, want the %d sent", len(r.body), len(b))
			}
			t.Logf("%d DATA frames; %d stream and %d connection WINDOW_UPDATEs", r.frames, r.streamUpdates, r.connUpdates)
			if r.streamUpdates == 0 || r.connUpdates == 0 {
				t.Errorf("the body needed %d stream and %d connection WINDOW_UPDATEs, want both windows to bind", r.streamUpdates, r.connUpdates)
			}
		})
	}
	wantServerConns(t, srv.Accepted.Load(), 1, "")
}

// --- bugs and edge cases found while testing -------------------------

// TestH2ClientBodyBlockedReadEndsWithStream: a body whose Read blocks
// (a client uploading slowly, relayed through the proxy) when its stream
// ends, by an answer in full or by a cancelled context, must be closed
// then, as x/net does (abortRequestBodyWrite closes it beside the
// blocked Read), so that the Read returns and the body writer ends.
// Otherwise the writer waits on the Read for as long as the body's
// producer likes (forever for a client that waits for the answer), the
// body is never closed, and RST_STREAM CANCEL never goes out.
func TestH2ClientBodyBlockedReadEndsWithStream(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newBodyServer(t, p)
	rt := newClients(t, p, Config{}).For(srv.addr)

	// blockedBody gives 10,000 bytes, then blocks until it is closed (or
	// the test ends).
	blockedBody := func(t *testing.T) *probeBody {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.CloseWithError(errors.New("test over")) })
		go pw.Write(pattern(4, 10000))
		body := newProbeBody(pr)
		// Close must unblock the Read, as the server's request bodies do.
		body.onClose = func() { pr.CloseWithError(errBodyClosed) }
		return body
	}

	t.Run("answered", func(t *testing.T) {
		body := blockedBody(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := testkit.RoundTrip(rt, bodyRequest(t, ctx, http.MethodPost, srv.addr, "/reject", body, -1))
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", res.StatusCode)
		}
		within(t, 5*time.Second, body.closed, "the request body to be closed once the server answered in full")
	})
	t.Run("cancelled", func(t *testing.T) {
		body := blockedBody(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := testkit.RoundTrip(rt, bodyRequest(t, ctx, http.MethodPost, srv.addr, "/sum", body, -1))
			errc <- err
		}()
		testkit.WaitFor(t, "the body's first bytes to be read", func() bool { return body.read.Load() == 10000 })
		cancel()
		if err := within(t, 5*time.Second, errc, "RoundTrip to return after the cancel"); !errors.Is(err, context.Canceled) {
			t.Errorf("RoundTrip: %v, want context.Canceled", err)
		}
		within(t, 5*time.Second, body.closed, "the request body to be closed after the request was cancelled")
	})
}

// TestH2ClientBodyClosedOnError: RoundTrip must close the request body
// even when it fails before sending it (http.RoundTripper's contract;
// x/net does): a header that cannot be sent, a dial that fails, a context
// done before the request went out.
func TestH2ClientBodyClosedOnError(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newBodyServer(t, p)
	tr := newClients(t, p, Config{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close()

	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		addr string
		ctx  context.Context
		prep func(*http.Request)
	}{
		{"invalid header", srv.addr, context.Background(), func(r *http.Request) { r.Header.Set("X-Bad", "line\nbreak") }},
		{"dial fails", deadAddr, context.Background(), func(*http.Request) {}},
		{"context done", srv.addr, done, func(*http.Request) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := newProbeBody(bytes.NewReader(pattern(5, 1000)))
			req := bodyRequest(t, tc.ctx, http.MethodPost, tc.addr, "/sum", body, 1000)
			tc.prep(req)
			res, err := tr.For(tc.addr).RoundTrip(req)
			if err == nil {
				res.Body.Close()
				t.Fatalf("RoundTrip succeeded with status %d, want an error", res.StatusCode)
			}
			within(t, 5*time.Second, body.closed, "the request body to be closed after RoundTrip failed ("+err.Error()+")")
		})
	}
}

// TestH2ClientBodyWindowBelowZero: a SETTINGS_INITIAL_WINDOW_SIZE that
// drops below what a stream has already sent leaves that stream's send
// window negative (RFC 9113 6.9.2); the END_STREAM that follows the body
// is an empty DATA frame, which needs no window and must still go out.
// The script grants a 1,000-byte window, takes the 1,000-byte body, then
// lowers the initial window to 500 (the stream's window: -500); only
// once the client acknowledged that does the body return its io.EOF.
func TestH2ClientBodyWindowBelowZero(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	acked := make(chan struct{})
	result := make(chan string, 1)
	srv := newScriptH2(t, p, func(c *scriptConn, id uint32, path string) {
		if path == "/settings" {
			c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
			c.headers(id, true, ":status", "200")
			return
		}
		got, lowered := 0, false
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				result <- fmt.Sprintf("connection lost: %v", err)
				return
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				if f.StreamID != id {
					continue
				}
				got += len(f.Data())
				if f.StreamEnded() {
					c.headers(id, true, ":status", "200")
					result <- fmt.Sprintf("%d bytes", got)
					return
				}
				if got == 1000 && !lowered {
					lowered = true
					c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 500})
				}
			case *http2.SettingsFrame:
				if f.IsAck() && lowered {
					close(acked)
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					result <- fmt.Sprintf("RST_STREAM %v", f.ErrCode)
					return
				}
			}
		}
	})
	rt := newClients(t, p, Config{}).For(srv.Addr)
	if _, err := testkit.RoundTrip(rt, testkit.NewRequest(t, context.Background(), srv.Addr, "/settings")); err != nil {
		t.Fatal(err)
	}
	body := newProbeBody(io.MultiReader(bytes.NewReader(pattern(6, 1000)), &waitEOF{ch: acked}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := testkit.RoundTrip(rt, bodyRequest(t, ctx, http.MethodPost, srv.Addr, "/upload", body, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if got := within(t, 5*time.Second, result, "the script's result"); got != "1000 bytes" {
		t.Errorf("the server got %s, want the 1000 bytes and END_STREAM", got)
	}
}

// waitEOF returns io.EOF once ch is closed.
type waitEOF struct{ ch <-chan struct{} }

func (w *waitEOF) Read([]byte) (int, error) {
	<-w.ch
	return 0, io.EOF
}
