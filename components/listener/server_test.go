package listener

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestRejectProxyRequests(t *testing.T) { forEachH1Server(t, testRejectProxyRequests) }

func testRejectProxyRequests(t *testing.T, h1 string) {
	tests := []struct {
		name       string
		raw        string
		wantCode   int
		wantReason metav1.StatusReason
	}{
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
		{"absolute-form to another host", "GET http://evil.example/api/v1/pods HTTP/1.1\r\nHost: evil.example\r\n\r\n", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"absolute-form to fanout's own address", "GET http://127.0.0.1:7080/api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1:7080\r\n\r\n", http.StatusBadRequest, metav1.StatusReasonBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, u := proxytest.OKBackend(t)
			s, _, _ := startProxy(t, Config{H1Server: h1}, p, u, nil)
			resp := testkit.RawRequest(t, s.Addr().String(), tc.raw)
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.wantCode)
			}
			st := testkit.ReadStatus(t, resp)
			if st.Reason != tc.wantReason || !strings.Contains(st.Message, "fanout is not an open proxy") {
				t.Errorf("Status = %q %q, want %q and 'fanout is not an open proxy'", st.Reason, st.Message, tc.wantReason)
			}
			if len(u.Calls()) != 0 {
				t.Error("a proxy request reached the upstream")
			}
		})
	}
	t.Run("origin-form passes", func(t *testing.T) {
		p, u := proxytest.OKBackend(t)
		s, _, _ := startProxy(t, Config{H1Server: h1}, p, u, nil)
		resp := testkit.RawRequest(t, s.Addr().String(), "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1:7080\r\n\r\n")
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2))
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Errorf("origin-form request: %d %q, want 200 ok", resp.StatusCode, b)
		}
	})
}

func TestServerLimits(t *testing.T) { forEachH1Server(t, testServerLimits) }

func testServerLimits(t *testing.T, h1 string) {
	p, u := proxytest.OKBackend(t)
	s, _, base := startProxy(t, Config{H1Server: h1, MaxHeaderBytes: 4 << 10, ReadHeaderTimeout: 200 * time.Millisecond}, p, u, nil)
	addr := s.Addr().String()
	client := testkit.NewClient(t, false)
	stillServes := func(t *testing.T) {
		t.Helper()
		resp, err := client.Get(base + "/api/v1/pods")
		if err != nil {
			t.Fatalf("the server stopped serving others: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("status = %d, want 200", resp.StatusCode)
		}
	}

	t.Run("oversized headers get 431", func(t *testing.T) {
		big := strings.Repeat("a", 64<<10)
		resp := testkit.RawRequest(t, addr, "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "+big+"\r\n\r\n")
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("status = %d, want 431", resp.StatusCode)
		}
		stillServes(t)
	})
	t.Run("garbage gets 400", func(t *testing.T) {
		resp := testkit.RawRequest(t, addr, "\x16\x03\x01garbage that is no HTTP\r\n\r\n")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
		stillServes(t)
	})
	t.Run("slow headers are cut", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n") // and never the blank line
		conn.SetReadDeadline(time.Now().Add(testkit.WaitLimit))
		b, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept a client that never finished its headers for %v", testkit.WaitLimit)
		}
		// net/http closes silently or answers 408; never 200.
		if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 408") {
			t.Errorf("answer to an unfinished request: %q", b)
		}
		stillServes(t)
	})
}

func TestH2CPriorKnowledge(t *testing.T) { forEachH1Server(t, testH2CPriorKnowledge) }

func testH2CPriorKnowledge(t *testing.T, h1 string) {
	p, u := proxytest.OKBackend(t)
	_, _, base := startProxy(t, Config{H1Server: h1}, p, u, nil)
	resp, err := testkit.NewClient(t, true).Get(base + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != "ok" {
		t.Errorf("h2c answer: %s %d %q, want HTTP/2.0 200 ok", resp.Proto, resp.StatusCode, b)
	}
}

// TestStopEndsWatchesAndDrainsShortRequests is the shutdown sequence: a
// watch ends with a complete body while a short request in flight still
// gets its answer, and Stop returns once it has.
func TestStopEndsWatchesAndDrainsShortRequests(t *testing.T) {
	forEachH1Server(t, testStopEndsWatchesAndDrainsShortRequests)
}

func testStopEndsWatchesAndDrainsShortRequests(t *testing.T, h1 string) {
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2c"}[h2c], func(t *testing.T) {
			release := make(chan struct{})
			shortArrived := make(chan struct{})
			watchEnded := make(chan struct{})
			p, u := proxytest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("watch") == "" {
					close(shortArrived)
					select {
					case <-release:
					case <-r.Context().Done():
						return
					}
					io.WriteString(w, "short done")
					return
				}
				io.WriteString(w, `{"type":"ADDED","n":1}`+"\n")
				w.(http.Flusher).Flush()
				io.WriteString(w, `{"type":"ADDED","n":2}`+"\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				close(watchEnded)
			}))
			s := New(Config{H1Server: h1, ListenAddress: "127.0.0.1:0"}, proxy.New(proxy.Config{}, p, u, nil), nil)
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer s.Stop(context.Background())
			base := "http://" + s.Addr().String()
			client := testkit.NewClient(t, h2c)

			watch, err := client.Get(base + "/api/v1/pods?watch=true")
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Body.Close()
			br := bufio.NewReader(watch.Body)
			// Both events reach the client before the stop: what the stop
			// must not do is lose or cut what was already delivered.
			var events string
			for range 2 {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				events += line
			}
			type result struct {
				body string
				err  error
			}
			shortCh := make(chan result, 1)
			go func() {
				resp, err := client.Get(base + "/api/v1/namespaces/ns/pods/p")
				if err != nil {
					shortCh <- result{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				shortCh <- result{string(b), err}
			}()
			testkit.Wait(t, shortArrived, "the short request to reach the apiserver")

			stopErr := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), testkit.WaitLimit)
				defer cancel()
				stopErr <- s.Stop(ctx)
			}()

			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("watch during Stop: %v, want a clean end of the stream", err)
			}
			if got := events + string(rest); got != `{"type":"ADDED","n":1}`+"\n"+`{"type":"ADDED","n":2}`+"\n" {
				t.Errorf("watch body = %q, want exactly the two events", got)
			}
			testkit.Wait(t, watchEnded, "the apiserver side of the watch to end")
			select {
			case err := <-stopErr:
				t.Fatalf("Stop returned %v while a short request was in flight", err)
			default:
			}

			close(release)
			r := <-shortCh
			if r.err != nil || r.body != "short done" {
				t.Errorf("short request during Stop: %q, %v; want it to complete", r.body, r.err)
			}
			select {
			case err := <-stopErr:
				if err != nil {
					t.Errorf("Stop = %v, want nil after a clean drain", err)
				}
			case <-time.After(testkit.WaitLimit):
				t.Fatal("Stop did not return after the last request finished")
			}
			if _, err := client.Get(base + "/api/v1/pods"); err == nil {
				t.Error("the server still accepts requests after Stop")
			}
			p.CheckDoneOnce(t)
		})
	}
}

func TestStopCutsShortRequestsAtDeadline(t *testing.T) {
	forEachH1Server(t, testStopCutsShortRequestsAtDeadline)
}

func testStopCutsShortRequestsAtDeadline(t *testing.T, h1 string) {
	arrived := make(chan struct{})
	p, u := proxytest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // never answers on its own
	}))
	s := New(Config{H1Server: h1, ListenAddress: "127.0.0.1:0"}, proxy.New(proxy.Config{}, p, u, nil), nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	errCh := make(chan error, 1)
	go func() {
		resp, err := testkit.NewClient(t, false).Get("http://" + s.Addr().String() + "/api/v1/pods")
		if err == nil {
			resp.Body.Close()
		}
		errCh <- err
	}()
	testkit.Wait(t, arrived, "the request to reach the apiserver")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want the deadline error after cutting a request", err)
	}
	select {
	case <-errCh:
	case <-time.After(testkit.WaitLimit):
		t.Fatal("the cut request never ended for the client")
	}
}

func TestServerStartStop(t *testing.T) { forEachH1Server(t, testServerStartStop) }

func testServerStartStop(t *testing.T, h1 string) {
	p, u := proxytest.OKBackend(t)
	s := New(Config{H1Server: h1, ListenAddress: "127.0.0.1:0"}, proxy.New(proxy.Config{}, p, u, nil), nil)
	if s.Addr() != nil {
		t.Error("Addr before Start is not nil")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("Stop before Start = %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	busy := New(Config{H1Server: h1, ListenAddress: s.Addr().String()}, proxy.New(proxy.Config{}, p, u, nil), nil)
	if err := busy.Start(context.Background()); err == nil || !strings.Contains(err.Error(), s.Addr().String()) {
		t.Errorf("Start on a busy port = %v, want an error naming the address", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	bad := New(Config{H1Server: h1, ListenAddress: "no-port"}, proxy.New(proxy.Config{}, p, u, nil), nil)
	if err := bad.Start(context.Background()); err == nil {
		t.Error("Start with an invalid address succeeded")
	}
}

// TestH1ServerChoice: Config.H1Server says who serves plaintext
// HTTP/1.1: internal/h1server unless it says std, net/http's server, which
// the tests run with forEachH1Server then reach; any other value is
// refused naming the flag.
func TestH1ServerChoice(t *testing.T) {
	for _, tc := range []struct {
		h1      string
		wantOwn bool
	}{{"", true}, {H1ServerOwn, true}, {H1ServerStd, false}} {
		p, u := proxytest.OKBackend(t)
		s, _, base := startProxy(t, Config{H1Server: tc.h1}, p, u, nil)
		if own := s.h1 != nil; own != tc.wantOwn {
			t.Errorf("H1Server %q: internal/h1server serves: %v, want %v", tc.h1, own, tc.wantOwn)
		}
		resp, err := testkit.NewClient(t, false).Get(base + "/api/v1/pods")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("H1Server %q: status %d, want 200", tc.h1, resp.StatusCode)
		}
	}
	if err := (Config{H1Server: "net/http"}).Validate(); err == nil || !strings.Contains(err.Error(), "--h1-server") {
		t.Errorf("H1Server \"net/http\": Validate = %v, want an error naming --h1-server", err)
	}
}

// TestHandlerIsServedNotAsked: the edge makes each request's context
// itself (reqinfo.WithRequest) and never calls back into the handler to
// build it, as kube-apiserver's filters never call the handler behind
// them: what the Server needs of its Handler is to serve and to stop.
// (That the listener does not import the proxy at all is the proxy's
// TestLayering.)
func TestHandlerIsServedNotAsked(t *testing.T) {
	var got []string
	typ := reflect.TypeFor[Handler]()
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	if want := []string{"CloseUpgrades", "ServeHTTP", "StopLongRunning"}; !slices.Equal(got, want) {
		t.Errorf("listener.Handler's methods are %v, want %v: the edge puts the request's state in its context "+
			"(internal/reqinfo, WithRequest) and the handler reads it there", got, want)
	}
}
