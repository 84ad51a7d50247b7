package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/logging"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// requestLines returns the line-per-request records in the JSON log b.
func requestLines(t *testing.T, b *testkit.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec["msg"] == "request" {
			out = append(out, rec)
		}
	}
	return out
}

// waitRequestLines waits until n request lines were logged: a short
// request's line is written once the handler returns, which may be just
// after the client read the answer.
func waitRequestLines(t *testing.T, b *testkit.Buffer, n int) []map[string]any {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d request log lines", n), func() bool { return len(requestLines(t, b)) >= n })
	return requestLines(t, b)
}

// checkFields compares the fields of rec named in want.
func checkFields(t *testing.T, rec map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got := rec[k]; fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("log field %s = %v, want %v (line %v)", k, got, v, rec)
		}
	}
}

// TestRequestLogLine: at -v 4 a request ends with one line naming the
// method, the path, the safe part of the query, the client, the endpoint
// that answered, the status, the attempts and the duration; tokens and
// other query parameters stay out.
func TestRequestLogLine(t *testing.T) {
	var addr string
	p, u := proxytest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"kind":"PodList"}`)
	}))
	addr = p.Addrs()[0]
	b := &testkit.Buffer{}
	_, _, base := startProxy(t, Config{Log: logging.New("json", logging.RequestVerbosity, b)}, p, u, nil)

	req, _ := http.NewRequest("GET", base+"/api/v1/namespaces/default/pods?labelSelector=app%3Dweb&continue=opaque&limit=5&command=secret", nil)
	req.Header.Set("User-Agent", "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/abcdef")
	req.Header.Set("Authorization", "Bearer very-secret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	lines := waitRequestLines(t, b, 1)
	if len(lines) != 1 {
		t.Fatalf("%d request lines for one request, want 1: %v", len(lines), lines)
	}
	rec := lines[0]
	checkFields(t, rec, map[string]any{
		"level": "DEBUG-4", "method": "GET", "path": "/api/v1/namespaces/default/pods",
		"query": "labelSelector=app%3Dweb&limit=5", "verb": "list",
		"user_agent": "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/abcdef",
		"endpoint":   addr, "status": 200, "attempts": 1,
	})
	if d, ok := rec["duration"].(float64); !ok || d <= 0 {
		t.Errorf("duration = %v, want a positive number of nanoseconds", rec["duration"])
	}
	if _, ok := rec["end"]; ok {
		t.Errorf("a short request's line has an end reason: %v", rec)
	}
	if s := b.String(); strings.Contains(s, "very-secret-token") || strings.Contains(s, "secret") || strings.Contains(s, "opaque") {
		t.Errorf("the log carries the token or a query parameter outside the list: %s", s)
	}
}

// TestRequestLogOffByDefault: below -v 4 no request line is written.
func TestRequestLogOffByDefault(t *testing.T) {
	for _, v := range []int{0, 1, 2, 3} {
		p, u := proxytest.OKBackend(t)
		b := &testkit.Buffer{}
		s, _, base := startProxy(t, Config{Log: logging.New("json", v, b)}, p, u, nil)
		resp, err := http.Get(base + "/api/v1/namespaces")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Once the listener has stopped, every handler has returned.
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := len(requestLines(t, b)); n != 0 {
			t.Errorf("-v %d: %d request lines, want none", v, n)
		}
	}
}

// shutdownThenOK returns two backends behind one picker: the first
// answers every request with kube-apiserver's shutdown 429, the second
// with 200.
func shutdownThenOK(t *testing.T) (p *proxytest.Picker, u *proxytest.Upstream, first, second string) {
	t.Helper()
	first, rt1 := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, shutdown429Body, http.StatusTooManyRequests)
	}), false)
	second, rt2 := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), false)
	u = proxytest.NewUpstream()
	u.Set(first, rt1)
	u.Set(second, rt2)
	return proxytest.NewPicker(first, second), u, first, second
}

// TestRetriedRequestNamesFinalEndpoint: a request moved after a shutdown
// answer is logged, and with EndpointHeader answered, with 2 attempts and
// the endpoint that answered last.
func TestRetriedRequestNamesFinalEndpoint(t *testing.T) {
	p, u, _, second := shutdownThenOK(t)
	b := &testkit.Buffer{}
	_, _, base := startProxy(t, Config{Log: logging.New("json", logging.RequestVerbosity, b), EndpointHeader: true}, p, u, nil)
	resp, err := http.Get(base + "/api/v1/namespaces/default/configmaps/x")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200 from the second endpoint", resp.StatusCode)
	}
	if got := resp.Header.Get(EndpointHeader); got != second {
		t.Errorf("%s = %q, want the endpoint that answered, %s", EndpointHeader, got, second)
	}
	if got := resp.Header.Get(AttemptsHeader); got != "2" {
		t.Errorf("%s = %q, want 2", AttemptsHeader, got)
	}
	lines := waitRequestLines(t, b, 1)
	checkFields(t, lines[0], map[string]any{"endpoint": second, "attempts": 2, "status": 200, "verb": "get"})
}

// TestEndpointHeader: off by default; on, it names the endpoint on the
// apiserver's answer and, on fanout's own error answer, the last endpoint
// tried.
func TestEndpointHeader(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		p, u := proxytest.OKBackend(t)
		_, _, base := startProxy(t, Config{}, p, u, nil)
		resp, err := http.Get(base + "/api/v1/namespaces")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, h := range []string{EndpointHeader, AttemptsHeader} {
			if v, ok := resp.Header[h]; ok {
				t.Errorf("%s: %v without EndpointHeader, want none", h, v)
			}
		}
	})
	t.Run("on", func(t *testing.T) {
		p, u := proxytest.OKBackend(t)
		_, _, base := startProxy(t, Config{EndpointHeader: true}, p, u, nil)
		resp, err := http.Get(base + "/api/v1/namespaces")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get(EndpointHeader), p.Addrs()[0]; got != want {
			t.Errorf("%s = %q, want %q", EndpointHeader, got, want)
		}
		if got := resp.Header.Get(AttemptsHeader); got != "1" {
			t.Errorf("%s = %q, want 1", AttemptsHeader, got)
		}
	})
	t.Run("fanout's error", func(t *testing.T) {
		// No RoundTripper for it: every attempt is unprocessed, and the
		// one retry goes to the same endpoint.
		p := proxytest.NewPicker("10.0.0.9:6443")
		_, _, base := startProxy(t, Config{EndpointHeader: true}, p, proxytest.NewUpstream(), nil)
		resp, err := http.Get(base + "/api/v1/namespaces")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", resp.StatusCode)
		}
		if got := resp.Header.Get(EndpointHeader); got != "10.0.0.9:6443" {
			t.Errorf("%s = %q on fanout's 502, want the endpoint tried last", EndpointHeader, got)
		}
		if got := resp.Header.Get(AttemptsHeader); got != "2" {
			t.Errorf("%s = %q on fanout's 502, want 2", AttemptsHeader, got)
		}
	})
}

// TestWatchEndReason: a watch's line says how it ended: the apiserver
// ended it, the client left, or fanout shut down.
func TestWatchEndReason(t *testing.T) {
	const watchPath = "/api/v1/namespaces/default/pods?watch=true"
	t.Run("apiserver", func(t *testing.T) {
		p, u := proxytest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"type":"ADDED","object":{}}`+"\n")
		}))
		b := &testkit.Buffer{}
		_, _, base := startProxy(t, Config{Log: logging.New("json", logging.RequestVerbosity, b)}, p, u, nil)
		resp, err := http.Get(base + watchPath)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		checkFields(t, waitRequestLines(t, b, 1)[0], map[string]any{"verb": "watch", "status": 200, "end": "apiserver", "query": "watch=true"})
	})
	t.Run("client", func(t *testing.T) {
		b, cp, resp := openWatch(t, watchPath)
		resp.Body.Close()
		testkit.Wait(t, cp.canceled, "the apiserver's request to be cancelled after the client left")
		checkFields(t, waitRequestLines(t, b, 1)[0], map[string]any{"verb": "watch", "status": 200, "end": "client"})
	})
	t.Run("shutdown", func(t *testing.T) {
		b, cp, resp := openWatch(t, watchPath)
		cp.h.StopLongRunning()
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		checkFields(t, waitRequestLines(t, b, 1)[0], map[string]any{"verb": "watch", "status": 200, "end": "shutdown"})
	})
}

// openWatch opens a watch through a proxy logging at -v 4, whose backend
// sends one event and holds the watch until it is cancelled, and reads
// the event.
func openWatch(t *testing.T, path string) (*testkit.Buffer, cancelWatchProxy, *http.Response) {
	t.Helper()
	b := &testkit.Buffer{}
	cp := startCancelWatchProxy(t, Config{Log: logging.New("json", logging.RequestVerbosity, b)})
	resp, err := http.Get(cp.base + path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	return b, cp, resp
}

// TestRebalancedBodyEndReason: a body the rebalancer says it ends
// (watch.RebalanceEnder) records that reason, not the client's.
func TestRebalancedBodyEndReason(t *testing.T) {
	st := &reqState{}
	body := &doneBody{rc: io.NopCloser(strings.NewReader("")), st: st}
	body.EndedByRebalancer()
	body.Close()
	if got := endReason(st.end.Load()); got != endRebalanced {
		t.Errorf("end reason %q, want rebalanced", got)
	}
	st2 := &reqState{}
	(&doneBody{rc: io.NopCloser(strings.NewReader("")), st: st2}).Close()
	if got := endReason(st2.end.Load()); got != endClient {
		t.Errorf("end reason %q without the rebalancer, want client", got)
	}
}

// TestLoggedQuery: only the listed parameters, none of a proxy
// subresource's.
func TestLoggedQuery(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		proxied   bool
	}{
		{"", "", false},
		{"watch=1&resourceVersion=5&allowWatchBookmarks=true", "watch=1&resourceVersion=5&allowWatchBookmarks=true", false},
		{"command=sh&command=-c&command=curl+-H+token&stdout=true", "", false},
		{"fieldSelector=spec.nodeName%3Dn1&continue=xyz&timeoutSeconds=300", "fieldSelector=spec.nodeName%3Dn1&timeoutSeconds=300", false},
		{"%6cimit=5", "%6cimit=5", false},
		{"limit=5&token=abc", "", true},
	} {
		origin := reqinfoOriginFor(tc.proxied)
		if got := loggedQuery(tc.raw, origin); got != tc.want {
			t.Errorf("loggedQuery(%q, proxied %v) = %q, want %q", tc.raw, tc.proxied, got, tc.want)
		}
	}
}

func reqinfoOriginFor(proxied bool) reqinfo.Origin {
	if proxied {
		return reqinfo.OriginProxy
	}
	return reqinfo.OriginAPIServer
}

// TestRoundTripperEndpointDebugging: the library's RoundTripper shares
// the line per request and the endpoint header, on the apiserver's
// answer and on fanout's own error.
func TestRoundTripperEndpointDebugging(t *testing.T) {
	p, u, _, second := shutdownThenOK(t)
	b := &testkit.Buffer{}
	h := New(Config{Log: logging.New("json", logging.RequestVerbosity, b), EndpointHeader: true}, p, u, nil)
	req, _ := http.NewRequest("GET", "https://ignored/api/v1/namespaces/default/configmaps/x", nil)
	resp, err := h.RoundTripper().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got, n := resp.Header.Get(EndpointHeader), resp.Header.Get(AttemptsHeader); got != second || n != "2" {
		t.Errorf("%s %q, %s %q; want %s after 2 attempts", EndpointHeader, got, AttemptsHeader, n, second)
	}
	// The body is closed: the line is written.
	lines := requestLines(t, b)
	if len(lines) != 1 {
		t.Fatalf("%d request lines after the body was closed, want 1", len(lines))
	}
	checkFields(t, lines[0], map[string]any{"endpoint": second, "attempts": 2, "status": 200})

	dead := New(Config{EndpointHeader: true}, proxytest.NewPicker("10.0.0.9:6443"), proxytest.NewUpstream(), nil)
	resp, err = dead.RoundTripper().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(EndpointHeader); resp.StatusCode != http.StatusBadGateway || got != "10.0.0.9:6443" {
		t.Errorf("fanout's error: status %d, %s %q; want 502 naming the endpoint tried", resp.StatusCode, EndpointHeader, got)
	}
}
