//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; this test's h2c client still uses it, like the transport.

package listener

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// gateBackend answers "ok" at once, except paths containing "block", which
// wait until release is closed. started gets a value per blocked request.
type gateBackend struct {
	started chan string
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	bodies  []string
}

func newGateBackend(t *testing.T) (*gateBackend, *proxytest.Picker, *proxytest.Upstream) {
	t.Helper()
	g := &gateBackend{started: make(chan string, 100), release: make(chan struct{})}
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.bodies = append(g.bodies, string(b))
		g.mu.Unlock()
		if strings.Contains(r.URL.RawQuery, "block") {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			g.started <- r.URL.String()
			select {
			case <-g.release:
			case <-r.Context().Done():
			}
			return
		}
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		io.WriteString(w, "ok")
	}), false)
	t.Cleanup(g.open)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	return g, proxytest.NewPicker(addr), u
}

func (g *gateBackend) open() { g.once.Do(func() { close(g.release) }) }

// waitStarted waits for a blocked request to reach the backend.
func (g *gateBackend) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-g.started:
	case <-time.After(testkit.WaitLimit):
		t.Fatal("a request within the limits did not reach the apiserver")
	}
}

func (g *gateBackend) bodyCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.bodies)
}

func TestInflightBudgets(t *testing.T) { forEachH1Server(t, testInflightBudgets) }

func testInflightBudgets(t *testing.T, h1 string) {
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c=%v", h2c), func(t *testing.T) {
			g, p, u := newGateBackend(t)
			m, _ := NewMetrics(nil)
			_, _, base := startProxy(t, Config{H1Server: h1, MaxInflight: 2, MaxLongRunning: 3}, p, u, m)
			client := testkit.NewClient(t, h2c)
			get := func(path string) *http.Response {
				t.Helper()
				resp, err := client.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			expect429 := func(path string, kind string) {
				t.Helper()
				resp := get(path)
				if resp.StatusCode != http.StatusTooManyRequests {
					resp.Body.Close()
					t.Fatalf("%s over the %s budget: status %d, want 429", path, kind, resp.StatusCode)
				}
				if resp.Header.Get("Retry-After") != "1" {
					t.Errorf("429 without Retry-After: 1 (got %q); client-go would not retry it", resp.Header.Get("Retry-After"))
				}
				st := testkit.ReadStatus(t, resp)
				if st.Reason != metav1.StatusReasonTooManyRequests || !strings.Contains(st.Message, kind+" requests in flight") {
					t.Errorf("Status = %q %q", st.Reason, st.Message)
				}
			}
			expectOK := func(path string) {
				t.Helper()
				resp := get(path)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "ok" {
					t.Fatalf("%s: %d %q, want 200 ok: a full budget of the other kind refused it", path, resp.StatusCode, b)
				}
			}

			// Fill the long-running budget with watches.
			var open []*http.Response
			for i := range 3 {
				open = append(open, get(fmt.Sprintf("/api/v1/pods?watch=true&block=%d", i)))
				g.waitStarted(t)
			}
			expect429("/api/v1/configmaps?watch=true&block=x", "long")
			// Short requests have their own budget.
			expectOK("/api/v1/pods")
			expectOK("/api/v1/namespaces/default/configmaps/x")

			// Fill the short budget with slow GETs.
			for i := range 2 {
				open = append(open, get(fmt.Sprintf("/api/v1/pods/x?block=%d", i)))
				g.waitStarted(t)
			}
			expect429("/api/v1/namespaces", "short")

			if got := testutil.ToFloat64(m.rejected.WithLabelValues(rejectLong)); got != 1 {
				t.Errorf("fanout_rejected_total{reason=long_inflight} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.rejected.WithLabelValues(rejectShort)); got != 1 {
				t.Errorf("fanout_rejected_total{reason=short_inflight} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.inflight.WithLabelValues("long")); got != 3 {
				t.Errorf("fanout_downstream_inflight_requests{kind=long} = %v, want 3", got)
			}

			// Budgets are given back.
			g.open()
			for _, r := range open {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			deadline := time.Now().Add(testkit.WaitLimit)
			for testutil.ToFloat64(m.inflight.WithLabelValues("short")) != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			expectOK("/api/v1/namespaces")
		})
	}
}

func TestConnectionLimit(t *testing.T) { forEachH1Server(t, testConnectionLimit) }

func testConnectionLimit(t *testing.T, h1 string) {
	p, u := proxytest.OKBackend(t)
	m, _ := NewMetrics(nil)
	s, _, _ := startProxy(t, Config{H1Server: h1, MaxConnections: 2}, p, u, m)
	addr := s.Addr().String()

	// keepAlive opens a connection and proves it is served.
	keepAlive := func() (net.Conn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(testkit.WaitLimit))
		io.WriteString(c, "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, nil
	}
	var held []net.Conn
	for range 2 {
		c, err := keepAlive()
		if err != nil {
			t.Fatalf("a connection within the limit was not served: %v", err)
		}
		held = append(held, c)
	}
	if got := testutil.ToFloat64(m.connections); got != 2 {
		t.Errorf("fanout_downstream_connections = %v, want 2", got)
	}
	if c, err := keepAlive(); err == nil {
		c.Close()
		t.Fatal("a third connection was served with --max-connections 2")
	}
	if got := testutil.ToFloat64(m.rejected.WithLabelValues(rejectConnections)); got != 1 {
		t.Errorf("fanout_rejected_total{reason=connections} = %v, want 1", got)
	}
	// A closed connection frees its slot.
	held[0].Close()
	var err error
	for deadline := time.Now().Add(testkit.WaitLimit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var c net.Conn
		if c, err = keepAlive(); err == nil {
			held[0] = c
			break
		}
	}
	if err != nil {
		t.Fatalf("no connection served after one of two closed: %v", err)
	}
	for _, c := range held {
		c.Close()
	}
}

func TestRequestBodyTimeout(t *testing.T) { forEachH1Server(t, testRequestBodyTimeout) }

func testRequestBodyTimeout(t *testing.T, h1 string) {
	const timeout = 300 * time.Millisecond
	t.Run("a stalled body is cut", func(t *testing.T) {
		stalled := "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789"
		if el := checkBodyCut(t, h1, timeout, stalled); el > testkit.WaitLimit/2 {
			t.Fatalf("the stalled body was held for %v", el)
		}
	})
	for _, tc := range []struct {
		h2c, chunked bool
		path         string
	}{
		{false, false, "/api/v1/namespaces/default/configmaps"},
		{false, true, "/api/v1/namespaces/default/configmaps"},
		{true, false, "/api/v1/namespaces/default/configmaps"},
		{true, true, "/api/v1/namespaces/default/configmaps"},
		// Long-running: the proxy subresource.
		{false, false, "/api/v1/namespaces/default/pods/p/proxy/upload"},
		{true, true, "/api/v1/namespaces/default/pods/p/proxy/upload"},
	} {
		t.Run(fmt.Sprintf("deadline lifted once the body is in, h2c=%v chunked=%v %s", tc.h2c, tc.chunked, tc.path), func(t *testing.T) {
			// The apiserver takes 3x the body timeout to answer: the
			// response must still arrive, and the connection serve on.
			_, p, u := newGateBackend(t)
			m, _ := NewMetrics(nil)
			_, _, base := startProxy(t, Config{H1Server: h1, RequestBodyTimeout: timeout}, p, u, m)
			client := testkit.NewClient(t, tc.h2c)
			for range 2 {
				var body io.Reader = strings.NewReader(`{"kind":"ConfigMap"}`)
				if tc.chunked {
					body = io.MultiReader(body) // length unknown to the client
				}
				resp, err := client.Post(base+tc.path+"?sleep="+(3*timeout).String(), "application/json", body)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "ok" {
					t.Fatalf("slow answer after a quick body: %d %q", resp.StatusCode, b)
				}
			}
			if got := testutil.ToFloat64(m.rejected.WithLabelValues(rejectBodyTimeout)); got != 0 {
				t.Errorf("fanout_rejected_total{reason=body_timeout} = %v, want 0", got)
			}
		})
	}
	t.Run("long-running requests' bodies are cut too", func(t *testing.T) {
		// A watch that declares a body and never sends it, and a body
		// trickling to a long-running path (the proxy subresource) that
		// is not in by the deadline: both are reset at the deadline, and
		// neither reaches the apiserver.
		for _, raw := range []string{
			"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1048576\r\n\r\nx",
			"POST /api/v1/namespaces/default/pods/p/proxy/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nchunk \r\n",
		} {
			if el := checkBodyCut(t, h1, timeout, raw); el < timeout || el > testkit.WaitLimit/2 {
				t.Errorf("%q: cut after %v, want at the %v deadline", raw[:30], el, timeout)
			}
		}
	})
}

// checkBodyCut writes raw, a request whose body is not in by the
// --request-body-timeout timeout, to a proxy of its own and checks that
// the connection is closed without an answer, counted as body_timeout,
// and that the request never reached the apiserver. It returns how long
// the cut took from the write.
func checkBodyCut(t *testing.T, h1 string, timeout time.Duration, raw string) time.Duration {
	t.Helper()
	g, p, u := newGateBackend(t)
	m, _ := NewMetrics(nil)
	s, _, _ := startProxy(t, Config{H1Server: h1, RequestBodyTimeout: timeout}, p, u, m)
	c := testkit.Dial(t, s.Addr().String())
	start := time.Now()
	io.WriteString(c, raw)
	// The event waited for: the connection is reset.
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("%q: a body not in by the deadline answered %d; want the connection closed", raw[:30], resp.StatusCode)
	}
	el := time.Since(start)
	if got := testutil.ToFloat64(m.rejected.WithLabelValues(rejectBodyTimeout)); got != 1 {
		t.Errorf("%q: fanout_rejected_total{reason=body_timeout} = %v, want 1", raw[:30], got)
	}
	if n := g.bodyCount(); n != 0 {
		t.Errorf("%q: the apiserver got %d requests; a cut body must not reach it", raw[:30], n)
	}
	return el
}

// TestMaxConcurrentStreams: the h2c listener advertises its stream limit
// in its SETTINGS and refuses a stream beyond it. The test speaks HTTP/2
// frames itself: x/net's StrictMaxConcurrentStreams client can deadlock
// when a reserved request waits behind one that holds the header lock
// (seen here with v0.60.0), which made an earlier client-based version of
// this test hang.
func TestMaxConcurrentStreams(t *testing.T) { forEachH1Server(t, testMaxConcurrentStreams) }

func testMaxConcurrentStreams(t *testing.T, h1 string) {
	g, p, u := newGateBackend(t)
	s, _, _ := startProxy(t, Config{H1Server: h1, MaxConcurrentStreams: 2}, p, u, nil)
	fr := dialH2C(t, s.Addr().String())
	// The server's first frame is its SETTINGS.
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("first frame from the server: %v, want its SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 2 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want 2", v, ok)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	open := func(id uint32) {
		t.Helper()
		hbuf.Reset()
		for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "127.0.0.1"}, {":path", fmt.Sprintf("/api/v1/pods?watch=true&block=%d", id)}} {
			enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	open(1)
	g.waitStarted(t)
	open(3)
	g.waitStarted(t)
	open(5)
	// The third stream is reset; the first two go on.
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the third stream to be refused: %v", err)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != 5 {
				t.Fatalf("stream %d reset (%v); only stream 5 is over the limit", rst.StreamID, rst.ErrCode)
			}
			if rst.ErrCode != http2.ErrCodeProtocol && rst.ErrCode != http2.ErrCodeRefusedStream {
				t.Errorf("stream 5 reset with %v, want PROTOCOL_ERROR or REFUSED_STREAM", rst.ErrCode)
			}
			break
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY %v: the connection was ended, not just the extra stream", ga.ErrCode)
		}
	}
	select {
	case u := <-g.started:
		t.Fatalf("a third stream (%s) ran on a connection limited to 2", u)
	case <-time.After(200 * time.Millisecond):
	}
	// Let the two watches end, and read them to their end, so that their
	// handlers are done before the server stops.
	g.open()
	ended := map[uint32]bool{}
	for !ended[1] || !ended[3] {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the watches to end: %v", err)
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) || f.Header().Type == http2.FrameRSTStream {
			ended[f.Header().StreamID] = true
		}
	}
}

func TestServerLogWriter(t *testing.T) {
	var buf strings.Builder
	w := serverLogWriter{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	fmt.Fprint(w, "http: TLS handshake error from 127.0.0.1:4000: tls: client didn't provide a certificate\n")
	fmt.Fprint(w, "http: Accept error: accept tcp: too many open files; retrying in 5ms\n")
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG msg=\"http: TLS handshake error") || !strings.Contains(out, "level=WARN msg=\"http: Accept error") {
		t.Errorf("server log lines:\n%s\nwant the handshake error at debug and the accept error as a warning", out)
	}
}

// TestLimitKind: the budget a request counts against, from its one
// classification: every upgrade is long-running whatever its path.
func TestLimitKind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		want    balancer.Kind
	}{
		{"get", http.MethodGet, "/api/v1/namespaces/ns/pods/p", nil, balancer.Short},
		{"watch", http.MethodGet, "/api/v1/pods?watch=true", nil, balancer.Long},
		{"Connection: Upgrade without Upgrade", http.MethodGet, "/api/v1/pods", map[string]string{"Connection": "Upgrade"}, balancer.Short},
		{"exec", http.MethodPost, "/api/v1/namespaces/ns/pods/p/exec?command=sh", map[string]string{"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}, balancer.Long},
		{"upgrade on a short path", http.MethodGet, "/api/v1/pods", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, balancer.Long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			info := reqinfo.New(r)
			if got := limitKind(&info); got != tc.want {
				t.Errorf("limitKind(%+v) = %v, want %v", info, got, tc.want)
			}
		})
	}
}

// TestEdgeClassifiesOnce: the server classifies each request once, puts
// that classification in the request's context (reqinfo.WithRequest) for
// the handler, and its limits count the request by the same one.
func TestEdgeClassifiesOnce(t *testing.T) {
	h := &recordingHandler{}
	m, _ := NewMetrics(nil)
	var longWhileServed float64
	served := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		longWhileServed = testutil.ToFloat64(m.inflight.WithLabelValues("long"))
		h.ServeHTTP(w, r)
	})
	edge := withRequestInfo(withLimits(served, 1, 1, 0, m))
	req := httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=true", nil)
	rec := httptest.NewRecorder()
	edge.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d, want the handler's 204", rec.Code)
	}
	if n := h.served.Load(); n != 1 {
		t.Errorf("handler served %d requests with a reqinfo.Request, want 1", n)
	}
	if req := h.lastRequest.Load(); req == nil || !req.LongRunning {
		t.Errorf("classification handed to the handler = %+v, want the watch's", req)
	}
	if longWhileServed != 1 {
		t.Errorf("long-running requests in flight while served = %v, want 1", longWhileServed)
	}
}
