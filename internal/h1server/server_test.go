package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// parityHandler answers by path, covering what the response writer has
// to decide: length or chunking, bodiless statuses, trailers, flushes,
// sniffing, bodies read or not, aborts.
func parityHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/small":
		io.WriteString(w, "hello")
	case "/large":
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("x", 5000))
	case "/declared":
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	case "/short-of-declared":
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
	case "/empty":
	case "/nocontent":
		w.Header().Set("Content-Length", "3")
		w.WriteHeader(http.StatusNoContent)
	case "/notmodified":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotModified)
	case "/created":
		w.Header().Set("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"kind":"Pod"}`)
	case "/odd-status":
		w.WriteHeader(599)
	case "/trailer":
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	case "/flush":
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		io.WriteString(w, "second")
	case "/close":
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	case "/sniff":
		io.WriteString(w, "<html><body>hi</body></html>")
	case "/newline":
		w.Header().Set("X-Split", "a\r\nX-Injected: 1")
		io.WriteString(w, "ok")
	case "/read":
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %d %v", len(b), err)
	case "/no-date":
		w.Header()["Date"] = nil // net/http's way to send none
		io.WriteString(w, "ok")
	case "/read-trailer":
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %d %v trailer %v", len(b), err, r.Trailer)
	case "/ignore":
		io.WriteString(w, "ignored")
	case "/abort":
		io.WriteString(w, strings.Repeat("y", 3000))
		panic(http.ErrAbortHandler)
	case "/abort-early":
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "bad")
		panic(http.ErrAbortHandler)
	case "/abort-proxied":
		// A reverse proxy whose upstream breaks mid-body aborts the
		// answer under a server that sets http.ServerContextKey.
		cutUpstream.ServeHTTP(w, r)
	case "/early-hints":
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "after hints")
	case "/proto":
		fmt.Fprintf(w, "%s %s host=%q remote-set=%v", r.Proto, r.Method, r.Host, r.RemoteAddr != "")
	default:
		http.NotFound(w, r)
	}
}

// cutUpstream is a reverse proxy whose upstream answers 3,000 bytes of
// a body of unknown length, then breaks (a reset HTTP/2 stream).
var cutUpstream = &httputil.ReverseProxy{
	Rewrite:  func(*httputil.ProxyRequest) {},
	ErrorLog: log.New(io.Discard, "", 0),
	Transport: testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		body := io.MultiReader(strings.NewReader(strings.Repeat("z", 3000)), iotest.ErrReader(errors.New("stream reset")))
		// A Content-Type of its own: ReverseProxy flushes the header on a
		// timer of its own as well as on the first write, and which comes
		// first decides whether a server sniffs one, in either server.
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}}, ContentLength: -1,
			Body: io.NopCloser(body), Request: r}, nil
	}),
}

// startH1 serves handler with the Server on loopback, h2c handed to
// net/http.
func startH1(t testing.TB, handler http.Handler, cfg Config) (string, *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Handler = handler
	s := New(cfg)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler, Protocols: &protocols, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		go srv.Serve(s.H2C())
		s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Close()
		srv.Close()
		<-done
		// A connection refused or cut lingers up to half a second before
		// its close (closeWriteAndWait); the leak check must not see it.
		testkit.WaitFor(t, "the server to end its connections and streams", func() bool {
			conns, streams := s.Open()
			return conns == 0 && streams == 0
		})
	})
	return ln.Addr().String(), s
}

// startNetHTTP serves handler with net/http's server, the reference;
// opts set what a test sets in fanout's Config too (timeouts).
func startNetHTTP(t testing.TB, handler http.Handler, opts ...func(*http.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	srv := &http.Server{Handler: handler, ErrorLog: log.New(io.Discard, "", 0), MaxHeaderBytes: DefaultMaxHeaderBytes,
		ConnState: func(_ net.Conn, state http.ConnState) {
			switch state {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		}}
	for _, o := range opts {
		o(srv)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		testkit.WaitFor(t, "net/http's server to end its connections", func() bool { return open.Load() == 0 })
	})
	return ln.Addr().String()
}

// dialServer dials addr with every read and write on it bounded by
// testkit.WaitLimit.
func dialServer(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testkit.WaitLimit))
	return c.(*net.TCPConn)
}

// exchange sends raw on a new connection and reads everything until the
// server closes it or, for a connection kept open, until a probe request
// sent after the expected responses is answered. It returns a transcript
// of what a client sees: status lines, headers (of Date whether it came), framing,
// bodies, trailers and whether the connection stayed open.
func exchange(t *testing.T, addr, raw string, responses int, afterHeader string) string {
	t.Helper()
	c := dialServer(t, addr)
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out strings.Builder
	for i := 0; i < responses; i++ {
		if afterHeader != "" && i == 0 {
			// 100 Continue, then the body.
			line, err := br.ReadString('\n')
			if err != nil {
				fmt.Fprintf(&out, "read error before body: %v\n", err)
				return out.String()
			}
			fmt.Fprintf(&out, "interim %q\n", strings.TrimSpace(line))
			if strings.HasPrefix(line, "HTTP/1.1 100") {
				br.ReadString('\n')
				io.WriteString(c, afterHeader)
			}
		}
		var sent *http.Request
		if strings.HasPrefix(raw, "HEAD ") {
			sent = &http.Request{Method: http.MethodHead}
		}
		resp, err := http.ReadResponse(br, sent)
		if err != nil {
			fmt.Fprintf(&out, "read error: %v\n", errClass(err))
			return out.String()
		}
		describe(&out, resp)
		if resp.Close {
			_, err := br.ReadByte()
			fmt.Fprintf(&out, "then: %v\n", errClass(err))
			return out.String()
		}
	}
	// Kept open: the connection must serve one more request.
	io.WriteString(c, "GET /small HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		fmt.Fprintf(&out, "probe: %v\n", errClass(err))
		return out.String()
	}
	resp.Body.Close()
	fmt.Fprintf(&out, "probe: %d\n", resp.StatusCode)
	return out.String()
}

// describe writes what a client sees of resp: status, headers (of Date
// only whether it came), framing, body and trailers.
func describe(out *strings.Builder, resp *http.Response) {
	body, berr := io.ReadAll(resp.Body)
	if _, ok := resp.Header["Date"]; ok {
		resp.Header["Date"] = []string{"(sent)"} // its value is the clock's
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range resp.Header {
			if !yield(k) {
				return
			}
		}
	})
	fmt.Fprintf(out, "%s %d chunked=%v length=%d close=%v\n", resp.Proto, resp.StatusCode,
		slices.Contains(resp.TransferEncoding, "chunked"), resp.ContentLength, resp.Close)
	for _, k := range keys {
		fmt.Fprintf(out, "  %s: %q\n", k, resp.Header[k])
	}
	if berr != nil {
		// A cut body: where it is cut depends on buffer sizes.
		fmt.Fprintf(out, "  body cut: %v\n", errClass(berr))
	} else {
		fmt.Fprintf(out, "  body %q trailer=%v\n", body, resp.Trailer)
	}
}

// errClass names an error by kind: the two servers word some alike
// failures differently (a reset against an EOF).
func errClass(err error) string {
	switch {
	case err == nil:
		return "<nil>"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		strings.Contains(err.Error(), "connection reset"):
		return "connection ended"
	}
	return err.Error()
}

// TestH1ServerMatchesNetHTTP sends the same bytes to net/http's server and
// to fanout's, with the same handler, and wants the same answers: every
// rule the writer and the request checks copy from net/http is held to
// it.
// parityCase is a request (or several) sent as raw bytes, how many
// responses it gets, and a body sent only after 100 Continue.
type parityCase struct {
	name, raw   string
	responses   int
	afterHeader string
}

func parityCases() []parityCase {
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n" }
	many := func(n int) string {
		var b strings.Builder
		b.WriteString("GET /small HTTP/1.1\r\nHost: localhost\r\n")
		for i := range n {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		b.WriteString("\r\n")
		return b.String()
	}
	chunkedTrailer := func(declared, fields int) string {
		var b strings.Builder
		b.WriteString("POST /read-trailer HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n")
		if declared > 0 {
			b.WriteString("Trailer: ")
			for i := range declared {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "T%d", i)
			}
			b.WriteString("\r\n")
		}
		b.WriteString("\r\n5\r\nhello\r\n0\r\n")
		for i := range fields {
			fmt.Fprintf(&b, "T%d: v\r\n", i)
		}
		b.WriteString("\r\n")
		return b.String()
	}
	return []parityCase{
		{"small body gets a length", get("/small"), 1, ""},
		{"large body is chunked", get("/large"), 1, ""},
		{"declared length", get("/declared"), 1, ""},
		{"shorter than declared closes", get("/short-of-declared"), 1, ""},
		{"empty", get("/empty"), 1, ""},
		{"204 drops its length", get("/nocontent"), 1, ""},
		{"304 drops its type", get("/notmodified"), 1, ""},
		{"status and repeated header", get("/created"), 1, ""},
		{"status without text", get("/odd-status"), 1, ""},
		{"trailers", get("/trailer"), 1, ""},
		{"flush before the end", get("/flush"), 1, ""},
		{"handler asks to close", get("/close"), 1, ""},
		{"content type sniffed", get("/sniff"), 1, ""},
		{"newline in a value", get("/newline"), 1, ""},
		{"abort cuts the response", get("/abort"), 1, ""},
		{"abort before anything went out", get("/abort-early"), 1, ""},
		{"reverse proxy whose upstream broke aborts", get("/abort-proxied"), 1, ""},
		{"103 before the answer", get("/early-hints"), 1, ""},
		{"request fields", get("/proto"), 1, ""},
		{"Date left out", get("/no-date"), 1, ""},
		{"HEAD of a small body", "HEAD /small HTTP/1.1\r\nHost: localhost\r\n\r\n", 1, ""},
		{"HEAD of a declared length", "HEAD /declared HTTP/1.1\r\nHost: localhost\r\n\r\n", 1, ""},
		{"client asks to close", "GET /small HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 1, ""},
		{"HTTP/1.0", "GET /small HTTP/1.0\r\n\r\n", 1, ""},
		{"HTTP/1.0 keep-alive with a length", "GET /declared HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1, ""},
		{"HTTP/1.0 keep-alive, length computed", "GET /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1, ""},
		{"HTTP/1.0 keep-alive, large", "GET /large HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1, ""},
		{"pipelined", get("/small") + get("/declared") + get("/large"), 3, ""},
		{"body read", "POST /read HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello", 1, ""},
		{"chunked body read", "POST /read HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 1, ""},
		{"small body not read is discarded", "POST /ignore HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello", 1, ""},
		{"large declared body not read closes", "POST /ignore HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\nhello", 1, ""},
		{"CRLF after a POST body", "POST /read HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nhi\r\n" + get("/small"), 2, ""},
		{"100-continue", "POST /read HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 1, "hello"},
		{"unknown expectation", "POST /read HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: something\r\n\r\nhello", 1, ""},
		{"missing Host", "GET /small HTTP/1.1\r\n\r\n", 1, ""},
		{"malformed Host", "GET /small HTTP/1.1\r\nHost: a b\r\n\r\n", 1, ""},
		{"invalid header name", "GET /small HTTP/1.1\r\nHost: localhost\r\nBad Name: v\r\n\r\n", 1, ""},
		{"500 header values", many(maxHeaderValues - 1), 1, ""},
		{"501 header values, Host among them", many(maxHeaderValues), 1, ""},
		{"501 header values, asterisk form", strings.Replace(many(maxHeaderValues), "GET /small", "OPTIONS *", 1), 1, ""},
		{"too many header values", many(maxHeaderValues + 1), 1, ""},
		{"header too large", "GET /small HTTP/1.1\r\nHost: localhost\r\nX-Big: " + strings.Repeat("b", DefaultMaxHeaderBytes+8192) + "\r\n\r\n", 1, ""},
		{"HTTP/2.0 as text", "GET /small HTTP/2.0\r\nHost: localhost\r\n\r\n", 1, ""},
		{"unsupported transfer encoding", "POST /read HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n", 1, ""},
		{"garbage", "NOT HTTP\r\n\r\n", 1, ""},
		{"declared trailer", chunkedTrailer(1, 1), 1, ""},
		{"undeclared trailer", chunkedTrailer(0, 2), 1, ""},
		{"trailer within 4 KiB", chunkedTrailer(0, 100), 1, ""},
		{"trailer past 4 KiB", chunkedTrailer(0, maxHeaderValues+1), 1, ""},
		{"500 trailer names declared", chunkedTrailer(maxHeaderValues, 0), 1, ""},
		{"too many trailer names declared", chunkedTrailer(maxHeaderValues+1, 0), 1, ""},
		{"the Trailer line counts as a header value", strings.Replace(many(maxHeaderValues-2), "GET /small HTTP/1.1\r\n",
			"POST /read HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTrailer: T\r\n", 1) + "0\r\n\r\n", 1, ""},
	}
}

func TestH1ServerMatchesNetHTTP(t *testing.T) {
	handler := http.HandlerFunc(parityHandler)
	ours, _ := startH1(t, handler, Config{})
	ref := startNetHTTP(t, handler)
	for _, tc := range parityCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := exchange(t, ref, tc.raw, tc.responses, tc.afterHeader)
			got := exchange(t, ours, tc.raw, tc.responses, tc.afterHeader)
			if got != want {
				t.Errorf("fanout's server answered\n%s\nnet/http's\n%s", got, want)
			}
		})
	}
}

// FuzzH1ServerMatchesNetHTTP sends the same bytes to net/http's server and
// to fanout's, shuts the sending side, and wants the same responses back,
// as describe puts them, and the same end of the connection. Its seeds are
// TestH1ServerMatchesNetHTTP's requests and TestSmuggling's (but the
// largest), bodies sent after 100 Continue included; go test -fuzz=FuzzH1ServerMatchesNetHTTP
// ./internal/h1server/ looks for more. The handler's aborts are left out:
// where a cut response stops depends on buffer sizes.
func FuzzH1ServerMatchesNetHTTP(f *testing.F) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/abort") {
			http.NotFound(w, r)
			return
		}
		parityHandler(w, r)
	})
	ours, _ := startH1(f, handler, Config{})
	ref := startNetHTTP(f, handler)
	for _, tc := range parityCases() {
		f.Add([]byte(tc.raw + tc.afterHeader))
	}
	for _, tc := range smugglingCases() {
		if raw := tc.raw + tc.slow + tc.late + tc.afterContinue; len(raw) <= 64<<10 {
			f.Add([]byte(raw))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if h2RequestLine.Match(raw) {
			// net/http serves "PRI * HTTP/2.0" as HTTP/1 for a handler
			// to take over; fanout's server answers 505 (docs/security.md,
			// cases where fanout is stricter).
			t.Skip("a PRI * HTTP/2.0 request line")
		}
		if optionsAsterisk.Match(raw) {
			// net/http's server answers it itself, fanout's passes it to
			// the handler (docs/security.md).
			t.Skip("an OPTIONS * request line")
		}
		if countsApart(raw) {
			t.Skip("header lines or trailer names the servers count apart")
		}
		want := rawExchange(t, ref, raw)
		got := rawExchange(t, ours, raw)
		if got != want && tooManyLinesThenFault(raw, got, want) {
			t.Skip(tooManyLinesApart)
		}
		if got != want {
			t.Errorf("for %q\nfanout's server answered\n%s\nnet/http's\n%s", raw, got, want)
		}
	})
}

var (
	h2RequestLine   = regexp.MustCompile(`(?m)^PRI \* HTTP/2\.0\r?$`)
	optionsAsterisk = regexp.MustCompile(`(?m)^OPTIONS \* `)
)

// tooManyLinesThenFault reports whether raw has over 500 lines and the
// servers refused it as TestSmuggling's otherStatus rows say
// (tooManyLinesApart): fanout's with 400, net/http's with 431.
func tooManyLinesThenFault(raw []byte, got, want string) bool {
	return bytes.Count(raw, []byte("\n")) > maxHeaderValues &&
		strings.HasPrefix(got, "HTTP/1.1 400 ") && strings.HasPrefix(want, "HTTP/1.1 431 ")
}

// countsApart reports whether raw may hold a request whose header lines
// or declared trailer names net/http's server counts past its cap of 500
// and fanout's does not: more than 500 names on Trailer lines (net/http
// counts repeats and empty ones, fanout the distinct names), or over 500
// lines among which Trailer or Transfer-Encoding ones (the parser keeps
// one of the first, none of the second on HTTP/1.0). docs/security.md
// says why that is harmless.
func countsApart(raw []byte) bool {
	names := 0
	lines := bytes.Split(raw, []byte("\n"))
	for _, l := range lines {
		if k, v, ok := bytes.Cut(l, []byte(":")); ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Trailer")) {
			names += bytes.Count(v, []byte(",")) + 1
		}
	}
	lower := bytes.ToLower(raw)
	return names > maxHeaderValues || len(lines) > maxHeaderValues &&
		(bytes.Contains(lower, []byte("trailer")) || bytes.Contains(lower, []byte("transfer-encoding")))
}

// rawExchange sends raw on a new connection, shuts the sending side and
// describes every response until the server closes.
func rawExchange(t *testing.T, addr string, raw []byte) string {
	t.Helper()
	return converse(t, addr, conversation{raw: raw})
}

// conversation is what a client sends: raw at once, then slow a byte at a
// time every byteGap, then late at once after a pause, then afterContinue
// once 100 Continue came.
type conversation struct {
	raw, slow     []byte
	byteGap       time.Duration
	late          []byte
	pause         time.Duration
	afterContinue []byte
}

// converse plays cv on a new connection and describes every response
// until the server closes. The sending side is shut once all is sent, or,
// when a body waits for 100 Continue, once a final answer came instead
// (the client gives up its body).
func converse(t *testing.T, addr string, cv conversation) string {
	t.Helper()
	c := dialServer(t, addr)
	defer c.Close()
	if _, err := c.Write(cv.raw); err != nil {
		return "write: " + errClass(err)
	}
	for _, b := range cv.slow {
		time.Sleep(cv.byteGap)
		if _, err := c.Write([]byte{b}); err != nil {
			break // closed by the server: what it answered says why
		}
	}
	if len(cv.late) > 0 {
		time.Sleep(cv.pause)
		c.Write(cv.late) // if closed by then, what came says so
	}
	waiting := len(cv.afterContinue) > 0
	if !waiting {
		c.CloseWrite()
	}
	var sent *http.Request
	if bytes.HasPrefix(cv.raw, []byte("HEAD ")) || len(cv.raw) == 0 && bytes.HasPrefix(cv.slow, []byte("HEAD ")) {
		sent = &http.Request{Method: http.MethodHead}
	}
	br := bufio.NewReader(c)
	var out strings.Builder
	for {
		resp, err := http.ReadResponse(br, sent)
		if err != nil {
			fmt.Fprintf(&out, "then: %s\n", errClass(err))
			return out.String()
		}
		describe(&out, resp)
		if waiting && resp.StatusCode == http.StatusContinue {
			c.Write(cv.afterContinue)
		}
		if waiting && (resp.StatusCode == http.StatusContinue || resp.StatusCode >= 200) {
			waiting = false
			c.CloseWrite()
		}
	}
}

// TestH1ServerTimeouts: a connection idle past IdleTimeout, or one that
// does not finish its request header within ReadHeaderTimeout, is closed.
// Each case sets the other timeout long, so that only the one under test
// can close the connection within the client's read deadline.
func TestH1ServerTimeouts(t *testing.T) {
	const short, long = 200 * time.Millisecond, time.Hour
	for _, tc := range []struct {
		name, raw string
		idle, hdr time.Duration
	}{
		{"idle after a request", "GET /small HTTP/1.1\r\nHost: localhost\r\n\r\n", short, long},
		{"header never finished", "GET /small HTTP/1.1\r\nHost: local", long, short},
		{"header never finished after a request", "GET /small HTTP/1.1\r\nHost: localhost\r\n\r\nGET /small HTTP/1.1\r\nHo", long, short},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := startH1(t, http.HandlerFunc(parityHandler), Config{IdleTimeout: tc.idle, ReadHeaderTimeout: tc.hdr})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second)) // a failure bound: long before the other timeout
			io.WriteString(c, tc.raw)
			start := time.Now()
			got, err := io.ReadAll(c) // until the server closes
			if err != nil {
				t.Fatalf("read: %v (want the server to close the connection)", err)
			}
			if n := strings.Count(string(got), "HTTP/1.1 200"); n != strings.Count(tc.raw, "\r\n\r\n") {
				t.Errorf("got %d answers before the close, want one per whole request:\n%s", n, got)
			}
			if d := time.Since(start); d < short*3/4 {
				t.Errorf("closed after %v, before the timeout", d)
			}
		})
	}
}

// TestH1ServerShutdown: idle connections are closed at once; a request in
// flight is answered, with Connection: close, and then its connection.
func TestH1ServerShutdown(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	addr, s := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "done")
	}), Config{})
	idle := dialServer(t, addr)
	defer idle.Close()
	ibr := bufio.NewReader(idle)
	io.WriteString(idle, "GET /fast HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if resp, err := http.ReadResponse(ibr, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	busy := dialServer(t, addr)
	defer busy.Close()
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
	testkit.Wait(t, arrived, "the slow request to arrive")

	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); err == nil {
		t.Error("the idle connection got data, want it closed")
	}
	select {
	case err := <-stopped:
		t.Fatalf("shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Error("the answer during shutdown does not say Connection: close")
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("shutdown = %v", err)
		}
	case <-time.After(testkit.WaitLimit):
		t.Fatal("shutdown did not return once the request was answered")
	}
}

// TestH1ServerReusesItsWriter: the response writer and its header map are
// the connection's; a request costs no new ones. Checked with a header
// set by one request that the next must not see.
func TestH1ServerReusesItsWriter(t *testing.T) {
	var writers []http.ResponseWriter
	addr, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writers = append(writers, w) // one connection: one goroutine
		if _, seen := w.Header()["X-First"]; seen {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-First", r.URL.Path)
	}), Config{})
	got := exchange(t, addr, "GET /a HTTP/1.1\r\nHost: localhost\r\n\r\nGET /b HTTP/1.1\r\nHost: localhost\r\n\r\n", 2, "")
	if strings.Contains(got, " 500 ") {
		t.Errorf("a header of the first request reached the second:\n%s", got)
	}
	if len(writers) < 2 || writers[0] != writers[1] {
		t.Errorf("writers %v, want the same one for each request on a connection", writers)
	}
}

// TestH1ServerPoolsConnectionBuffers: a client that dials for each
// request gets the buffers of connections that ended, not new ones. The
// pool may drop a set (GC, and at random under the race detector), so
// the test asks for fewer sets made than connections, by a wide margin.
func TestH1ServerPoolsConnectionBuffers(t *testing.T) {
	addr, s := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), Config{})
	open := func() bool {
		conns, _ := s.Open()
		return conns > 0
	}
	const conns = 60
	before := buffersMade.Load()
	for range conns {
		got := exchange(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 1, "")
		if !strings.Contains(got, "HTTP/1.1 200") {
			t.Fatalf("response:\n%s", got)
		}
		testkit.WaitFor(t, "the server to end the connection", func() bool { return !open() })
	}
	if made := buffersMade.Load() - before; made >= conns/2 {
		t.Errorf("%d buffer sets made for %d connections one after another, want them reused", made, conns)
	}
}

// TestH1ServerServesWithoutWatcher: with the hang-up watcher stopped (or
// not available: not Linux), the Server still serves the connection
// itself; nothing is handed to net/http but h2c.
func TestH1ServerServesWithoutWatcher(t *testing.T) {
	addr, s := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ours := w.(*response)
		w.Header().Set("X-Served-By-H1server", strconv.FormatBool(ours))
	}), Config{})
	first := exchange(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", 1, "")
	s.hangups.stop()
	second := exchange(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", 1, "")
	for _, got := range []string{first, second} {
		if !strings.Contains(got, `X-Served-By-H1server: ["true"]`) {
			t.Errorf("before the watcher stopped:\n%s\nafter:\n%s\nwant this server both times", first, second)
		}
	}
}
