package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestForwardsRequestAndReportsDone runs the handler in a synctest bubble
// before an in-memory apiserver, so that the latency it reports is exact:
// from sending the request to the answer's headers, not to its body.
func TestForwardsRequestAndReportsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			method, uri, host, body string
			tls                     bool
		}
		const headersAfter = 10 * time.Millisecond
		got := make(chan seen, 1)
		srv := httptest.NewTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- seen{r.Method, r.RequestURI, r.Host, string(b), r.TLS != nil}
			time.Sleep(headersAfter)
			w.Header().Set("X-From", "apiserver")
			w.WriteHeader(http.StatusCreated)
			w.(http.Flusher).Flush()
			time.Sleep(headersAfter) // the body comes later: not part of the latency
			io.WriteString(w, `{"kind":"Pod"}`)
		}))
		srv.EnableHTTP2 = true
		const addr = "10.0.0.1:6443"
		p := proxytest.NewPicker(addr)
		u := proxytest.NewUpstream()
		u.Set(addr, srv.Client().Transport)
		h := New(Config{}, p, u, nil)

		target := "/api/v1/namespaces/a%2Fb/pods?labelSelector=app%3Dx&limit=5"
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"spec":{}}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated || rec.Body.String() != `{"kind":"Pod"}` || rec.Header().Get("X-From") != "apiserver" {
			t.Errorf("response = %d %q X-From=%q, want the apiserver's 201", rec.Code, rec.Body, rec.Header().Get("X-From"))
		}
		s := <-got
		want := seen{"POST", target, addr, `{"spec":{}}`, true}
		if s != want {
			t.Errorf("apiserver saw %+v, want %+v", s, want)
		}
		if calls := u.Calls(); len(calls) != 1 || calls[0] != (proxytest.Call{Addr: addr, Mode: transport.AuthSidecar}) {
			t.Errorf("upstream calls = %+v, want one sidecar-mode call to %s", calls, addr)
		}
		waitDone(t, p, 1)
		p.CheckDoneOnce(t)
		r := p.Records()[0]
		// The API is kube-apiserver's reading of the decoded path.
		if r.Info != (balancer.PickInfo{Kind: balancer.Short, Class: balancer.ClassCreate, API: balancer.API{Version: "v1", Resource: "b"}}) {
			t.Errorf("PickInfo = %+v, want a Short create pick with nothing to avoid", r.Info)
		}
		d := r.Dones[0]
		if d.Err != nil || d.Unavailable || d.StatusCode != http.StatusCreated || d.Latency != headersAfter {
			t.Errorf("DoneInfo = %+v, want status 201, no error and latency %v (from sending to the headers)", d, headersAfter)
		}
	})
}

// waitDone waits until n picks reported Done: the reverse proxy closes the
// upstream body just after the client has the last byte.
func waitDone(t *testing.T, p *proxytest.Picker, n int) {
	t.Helper()
	deadline := time.Now().Add(testkit.WaitLimit)
	for {
		done := 0
		for _, r := range p.Records() {
			if len(r.Dones) > 0 {
				done++
			}
		}
		if done >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d picks reported Done", done, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	// HTTP/1.1 upstream: an HTTP/2 transport would drop connection-specific
	// headers by itself and hide a proxy that forwards them.
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		if len(r.TransferEncoding) > 0 {
			h["Transfer-Encoding"] = r.TransferEncoding
		}
		got <- h
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Kept", "yes")
	}), true)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	_, _, base := startProxy(t, Config{}, p, u, nil)

	req, _ := http.NewRequest("PUT", base+"/api/v1/namespaces/ns/configmaps/c", io.NopCloser(strings.NewReader("chunked body")))
	req.ContentLength = -1 // sent chunked
	req.Header = http.Header{
		"User-Agent":            {"kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc/leader-election"},
		"Authorization":         {"Bearer caller-token"},
		"Impersonate-User":      {"system:serviceaccount:ns:sa"},
		"Impersonate-Group":     {"g1", "g2"},
		"Impersonate-Extra-Foo": {"bar"},
		"Accept":                {"application/vnd.kubernetes.protobuf, */*"},
		"X-Forwarded-For":       {"203.0.113.9"},
		"X-Forwarded-Host":      {"evil.example"},
		"X-Forwarded-Proto":     {"https"},
		"Forwarded":             {"for=203.0.113.9"},
		"Connection":            {"keep-alive, X-Hop"},
		"X-Hop":                 {"must not pass"},
		"Keep-Alive":            {"timeout=5"},
		"Te":                    {"gzip"},
		"Proxy-Authorization":   {"Basic Zm9vOmJhcg=="},
		"Proxy-Connection":      {"keep-alive"},
		"Upgrade":               {"h2c"},
	}
	resp, err := testkit.NewClient(t, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h := <-got

	for _, k := range []string{"User-Agent", "Authorization", "Impersonate-User", "Impersonate-Group", "Impersonate-Extra-Foo", "Accept"} {
		if fmt.Sprint(h.Values(k)) != fmt.Sprint(req.Header.Values(k)) {
			t.Errorf("%s = %q upstream, want it unchanged: %q", k, h.Values(k), req.Header.Values(k))
		}
	}
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded",
		"Connection", "X-Hop", "Keep-Alive", "Te", "Proxy-Authorization", "Proxy-Connection", "Upgrade", "Transfer-Encoding"} {
		if v, ok := h[k]; ok {
			t.Errorf("%s = %q reached the apiserver, want it dropped", k, v)
		}
	}
	if calls := u.Calls(); len(calls) != 1 || calls[0].Mode != transport.AuthPassthrough {
		t.Errorf("upstream calls = %+v, want one passthrough call for a request with its own token", calls)
	}
	for _, k := range []string{"X-Resp-Hop", "Keep-Alive"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("response header %s = %q reached the client, want it dropped", k, v)
		}
	}
	if resp.Header.Get("X-Kept") != "yes" {
		t.Errorf("response header X-Kept lost")
	}
}

func TestWatchFlushesEachEvent(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c=%v", h2c), func(t *testing.T) {
			more := make(chan struct{})
			addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"type":"ADDED"}`+"\n")
				w.(http.Flusher).Flush()
				select {
				case <-more:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, `{"type":"MODIFIED"}`+"\n")
			}), false)
			p := proxytest.NewPicker(addr)
			u := proxytest.NewUpstream()
			u.Set(addr, rt)
			_, _, base := startProxy(t, Config{}, p, u, nil)

			resp, err := testkit.NewClient(t, h2c).Get(base + "/api/v1/pods?watch=true")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			first := make(chan string, 1)
			go func() {
				line, _ := br.ReadString('\n')
				first <- line
			}()
			select {
			case line := <-first:
				if line != `{"type":"ADDED"}`+"\n" {
					t.Fatalf("first event = %q", line)
				}
			case <-time.After(testkit.WaitLimit):
				close(more)
				t.Fatal("the first event did not reach the client while the apiserver held the stream open: not flushed")
			}
			close(more)
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != `{"type":"MODIFIED"}`+"\n" {
				t.Errorf("rest of watch = %q, %v", rest, err)
			}
			if r := p.Records(); len(r) != 1 || r[0].Info.Kind != balancer.Long {
				t.Errorf("picks = %+v, want one Long pick", r)
			}
		})
	}
}

func TestRetry(t *testing.T) {
	const dead = "192.0.2.1:6443" // the endpoint that fails
	small := "apiVersion: v1\nkind: ConfigMap\n"
	big := strings.Repeat("x", 2048)
	unprocessed := func(r *http.Request) (*http.Response, error) {
		// An HTTP/2 transport may have sent part of the body already.
		if r.Body != nil {
			io.ReadFull(r.Body, make([]byte, 7))
		}
		return nil, &transport.UnprocessedError{Endpoint: dead, Err: errors.New("stream refused")}
	}
	processed := func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
		}
		return nil, errors.New("http2: stream reset after the request was sent")
	}
	tests := []struct {
		name        string
		deadRT      func(*http.Request) (*http.Response, error)
		otherDown   bool // the second endpoint fails the same way
		method      string
		body        string
		chunked     bool
		wantStatus  int
		wantRetried bool
	}{
		{"GET retried", unprocessed, false, "GET", "", false, 200, true},
		{"POST small body replayed", unprocessed, false, "POST", small, false, 200, true},
		{"POST chunked small body replayed", unprocessed, false, "POST", small, true, 200, true},
		{"body over MaxReplayBody streams without retry", unprocessed, false, "POST", big, false, 502, false},
		{"chunked body over MaxReplayBody streams without retry", unprocessed, false, "POST", big, true, 502, false},
		{"processed GET retried: reads change nothing", processed, false, "GET", "", false, 200, true},
		{"processed POST never retried", processed, false, "POST", small, false, 502, false},
		{"retried only once", unprocessed, true, "GET", "", false, 502, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			good, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%s %s", r.Method, b)
			}), false)
			// dead sorts first, so the fake picker tries it first.
			p := proxytest.NewPicker(dead, good)
			u := proxytest.NewUpstream()
			u.Set(dead, testkit.RoundTripFunc(tc.deadRT))
			if tc.otherDown {
				u.Set(good, testkit.RoundTripFunc(tc.deadRT))
			} else {
				u.Set(good, rt)
			}
			m, _ := NewMetrics(nil)
			_, _, base := startProxy(t, Config{MaxReplayBody: 1024}, p, u, m)

			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
				if tc.chunked {
					body = io.NopCloser(body) // hides the length: sent chunked
				}
			}
			req, _ := http.NewRequest(tc.method, base+"/api/v1/namespaces/ns/configmaps", body)
			resp, err := testkit.NewClient(t, false).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if tc.wantStatus == 200 {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := tc.method + " " + tc.body; string(b) != want {
					t.Errorf("the retried request reached the apiserver as %q, want %q", b, want)
				}
			} else {
				st := testkit.ReadStatus(t, resp)
				if !strings.Contains(st.Message, dead) {
					t.Errorf("Status message %q does not name the failed endpoint %s", st.Message, dead)
				}
				if st.Reason != metav1.StatusReasonInternalError {
					t.Errorf("reason = %q, want InternalError", st.Reason)
				}
				if tc.otherDown && !strings.Contains(st.Message, "retried after") {
					t.Errorf("Status message %q does not tell about the first attempt", st.Message)
				}
			}
			waitDone(t, p, 1)

			picks := p.Records()
			wantPicks := 1
			if tc.wantRetried {
				wantPicks = 2
			}
			if len(picks) != wantPicks {
				t.Fatalf("picks = %+v, want %d", picks, wantPicks)
			}
			if picks[0].Addr != dead || picks[0].Info.Avoid != "" {
				t.Errorf("first pick = %+v, want %s with nothing avoided", picks[0], dead)
			}
			if d := picks[0].Dones; len(d) != 1 || d[0].Err == nil || d[0].Unavailable != transport.IsUnprocessed(d[0].Err) {
				t.Errorf("first Done = %+v, want the error, Unavailable only if unprocessed", d)
			}
			if tc.wantRetried {
				if picks[1].Info.Avoid != dead || picks[1].Addr != good {
					t.Errorf("retry pick = %+v, want %s avoiding %s", picks[1], good, dead)
				}
				reason := reasonUnprocessed
				if !transport.IsUnprocessed(picks[0].Dones[0].Err) {
					reason = reasonRead
				}
				if got := counterValue(t, m.retries.WithLabelValues(reason)); got != 1 {
					t.Errorf("fanout_retries_total{reason=%s} = %v, want 1", reason, got)
				}
			}
			wantHits := int32(0)
			if tc.wantStatus == 200 {
				wantHits = 1
			}
			if hits.Load() != wantHits {
				t.Errorf("the good apiserver got %d requests, want %d", hits.Load(), wantHits)
			}
		})
	}
}

func TestErrorsAnswerStatus(t *testing.T) {
	killedAddr, killedRT := func() (string, http.RoundTripper) {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.EnableHTTP2 = true
		srv.StartTLS()
		addr, rt := srv.Listener.Addr().String(), srv.Client().Transport
		srv.Close() // killed: its port now refuses connections
		return addr, rt
	}()
	timeoutErr := &net.OpError{Op: "read", Net: "tcp", Err: fakeTimeout{}}
	tests := []struct {
		name       string
		picker     *proxytest.Picker
		rt         http.RoundTripper
		wantCode   int
		wantReason metav1.StatusReason
		wantInMsg  []string
		wantDone   *balancer.DoneInfo // Unavailable expected, when a pick happened
	}{
		{
			name:       "killed backend",
			picker:     proxytest.NewPicker(killedAddr),
			rt:         killedRT,
			wantCode:   http.StatusBadGateway,
			wantReason: metav1.StatusReasonInternalError,
			wantInMsg:  []string{killedAddr, "refused"},
			wantDone:   &balancer.DoneInfo{Unavailable: true},
		},
		{
			name:       "no endpoints",
			picker:     proxytest.NewPicker(),
			wantCode:   http.StatusServiceUnavailable,
			wantReason: metav1.StatusReasonServiceUnavailable,
			wantInMsg:  []string{"no kube-apiserver endpoint"},
		},
		{
			name:     "timeout",
			picker:   proxytest.NewPicker("192.0.2.7:6443"),
			rt:       testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { return nil, timeoutErr }),
			wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout,
			wantInMsg: []string{"192.0.2.7:6443", "i/o timeout"},
			wantDone:  &balancer.DoneInfo{Unavailable: false},
		},
		{
			name:     "deadline exceeded",
			picker:   proxytest.NewPicker("192.0.2.8:6443"),
			rt:       testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { return nil, context.DeadlineExceeded }),
			wantCode: http.StatusGatewayTimeout, wantReason: metav1.StatusReasonTimeout,
			wantInMsg: []string{"192.0.2.8:6443"},
			wantDone:  &balancer.DoneInfo{Unavailable: false},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := proxytest.NewUpstream()
			if tc.rt != nil {
				u.Set(tc.picker.Addrs()[0], tc.rt)
			}
			m, _ := NewMetrics(nil)
			_, _, base := startProxy(t, Config{}, tc.picker, u, m)
			resp, err := testkit.NewClient(t, false).Get(base + "/api/v1/pods")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.wantCode)
			}
			if tc.wantCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After: client-go would not retry it")
			}
			st := testkit.ReadStatus(t, resp)
			if st.Reason != tc.wantReason {
				t.Errorf("reason = %q, want %q", st.Reason, tc.wantReason)
			}
			for _, s := range tc.wantInMsg {
				if !strings.Contains(st.Message, s) {
					t.Errorf("message %q does not mention %q", st.Message, s)
				}
			}
			endpoint := ""
			if len(tc.picker.Addrs()) > 0 {
				endpoint = tc.picker.Addrs()[0]
			}
			if got := counterValue(t, m.requests.WithLabelValues("short", fmt.Sprint(tc.wantCode), endpoint)); got != 1 {
				t.Errorf("fanout_requests_total{code=%d,endpoint=%q} = %v, want 1", tc.wantCode, endpoint, got)
			}
			if tc.wantDone != nil {
				r := tc.picker.Records()
				if len(r) != 1 || len(r[0].Dones) != 1 || r[0].Dones[0].Err == nil || r[0].Dones[0].Unavailable != tc.wantDone.Unavailable {
					t.Errorf("picks = %+v, want one Done with an error and Unavailable=%v", r, tc.wantDone.Unavailable)
				}
			}
		})
	}
}

type fakeTimeout struct{}

func (fakeTimeout) Error() string   { return "i/o timeout" }
func (fakeTimeout) Timeout() bool   { return true }
func (fakeTimeout) Temporary() bool { return true }

func TestUpgradeNotImplemented(t *testing.T) {
	p := proxytest.NewPicker("192.0.2.1:6443")
	u := proxytest.NewUpstream()
	_, _, base := startProxy(t, Config{}, p, u, nil)
	req, _ := http.NewRequest("POST", base+"/api/v1/namespaces/ns/pods/p/exec?command=sh", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	req.Header.Set("X-Stream-Protocol-Version", "v4.channel.k8s.io")
	resp, err := testkit.NewClient(t, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("status = %d, want 501", resp.StatusCode)
	}
	if st := testkit.ReadStatus(t, resp); !strings.Contains(st.Message, "cannot dial HTTP/1.1 connections for upgrade requests") {
		t.Errorf("message = %q", st.Message)
	}
	if len(p.Records()) != 0 || len(u.Calls()) != 0 {
		t.Errorf("an upgrade reached the balancer or transport")
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c=%v", h2c), func(t *testing.T) {
			cw := startCancelWatchProxy(t, Config{})
			resp, cancel := cw.openWatch(t, h2c)
			if got := gaugeValue(t, cw.m.openLong); got != 1 {
				t.Errorf("fanout_open_long_running_requests = %v during the watch, want 1", got)
			}
			cw.leave(t, resp, cancel)
		})
	}
}

// TestStopLongRunning drives the Handler alone: a watch open before the stop
// ends with a complete body, one whose headers arrive after it ends empty,
// and new requests are refused.
func TestStopLongRunning(t *testing.T) {
	headersGo := make(chan struct{})
	reqArrived := make(chan string, 2)
	upstreamGone := make(chan string, 2)
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		reqArrived <- name
		if name == "late" {
			select {
			case <-headersGo:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		upstreamGone <- name
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	h := New(Config{}, p, u, nil)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close) // after the watch's answer closes
	client := testkit.NewClient(t, false)

	_, br := openStream(t, context.Background(), client, front.URL+"/api/v1/pods?watch=true&name=early")
	type result struct {
		resp *http.Response
		err  error
	}
	lateCh := make(chan result, 1)
	go func() {
		resp, err := client.Get(front.URL + "/api/v1/pods?watch=true&name=late")
		lateCh <- result{resp, err}
	}()
	<-reqArrived // early
	<-reqArrived // late, waiting before its headers

	h.StopLongRunning()
	h.StopLongRunning() // idempotent

	rest, err := io.ReadAll(br)
	if err != nil {
		t.Errorf("watch open at stop: reading to the end: %v, want a clean EOF", err)
	}
	if len(rest) != 0 {
		t.Errorf("watch open at stop: unexpected trailing data %q", rest)
	}

	close(headersGo)
	late := <-lateCh
	if late.err != nil {
		t.Fatal(late.err)
	}
	b, err := io.ReadAll(late.resp.Body)
	late.resp.Body.Close()
	if err != nil || late.resp.StatusCode != 200 || len(b) > len(`{"type":"ADDED"}`+"\n") {
		t.Errorf("watch whose headers came after stop: %d %q %v, want 200 with a clean, at most one-event body", late.resp.StatusCode, b, err)
	}
	for range 2 {
		select {
		case <-upstreamGone:
		case <-time.After(testkit.WaitLimit):
			t.Fatal("the apiserver side of a stopped watch stayed open")
		}
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/pods", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("request after stop: %d, want 503", rec.Code)
	}
	if st := testkit.ReadStatus(t, rec.Result()); st.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("reason = %q, want ServiceUnavailable", st.Reason)
	}
	front.Close()
	p.CheckDoneOnce(t)
}

// TestLongBodyClosedFromTwoGoroutines: a watch's body is closed by the
// goroutine reading it and, at the same time, by the rebalancer ending
// the watch (watch.watchStream.requestEnd closes the body it reads
// from). Under -race this fails if taking the body out of the
// Handler's list (bodySet) is not synchronised.
func TestLongBodyClosedFromTwoGoroutines(t *testing.T) {
	h := New(Config{}, proxytest.NewPicker("a"), proxytest.NewUpstream(), nil)
	for range 100 {
		b := h.watchBody(nil, io.NopCloser(strings.NewReader("")), &reqState{Request: new(reqinfo.Request), classified: classified{Kind: balancer.Long}}, balancer.Pick{}, balancer.DoneInfo{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { _ = b.Close() })
		}
		wg.Wait()
	}
	h.longBodies.mu.Lock()
	defer h.longBodies.mu.Unlock()
	if h.longBodies.list.len() != 0 {
		t.Error("closed long-running bodies are still in the Handler's list")
	}
}
