package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	fwatch "github.com/fanout-dev/fanout/components/watch"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// trackedBody records whether the RoundTripper closed the request body.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

// TestRoundTripper checks that the library entry point behaves like
// ServeHTTP: the URL's host is ignored, unprocessed requests are retried
// elsewhere, bodies of unknown length are forwarded, failures become the
// sidecar's Status answers, and Done is reported when the body ends.
func TestRoundTripper(t *testing.T) {
	const dead = "192.0.2.1:6443"
	unprocessed := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return nil, &transport.UnprocessedError{Endpoint: dead, Err: errors.New("stream refused")}
	})
	tests := []struct {
		name       string
		method     string
		body       string
		unknownLen bool // body with ContentLength 0, as client-go sends a stream
		deadFirst  bool
		noEndpoint bool
		upgrade    bool
		wantStatus int
		wantBody   string
		wantReason metav1.StatusReason
		wantPicks  int
	}{
		{name: "GET", method: "GET", wantStatus: 200, wantBody: "GET  endpoint", wantPicks: 1},
		{name: "POST with length", method: "POST", body: "data", wantStatus: 200, wantBody: "POST data endpoint", wantPicks: 1},
		{name: "POST of unknown length", method: "POST", body: "data", unknownLen: true, wantStatus: 200, wantBody: "POST data endpoint", wantPicks: 1},
		{name: "unprocessed retried elsewhere", method: "POST", body: "data", deadFirst: true, wantStatus: 200, wantBody: "POST data endpoint", wantPicks: 2},
		{name: "no endpoint is 503", method: "GET", noEndpoint: true, wantStatus: 503, wantReason: metav1.StatusReasonServiceUnavailable},
		{name: "upgrade is 501", method: "GET", upgrade: true, wantStatus: 501, wantReason: metav1.StatusReasonUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				// r.Host is the :authority: it must be the endpoint, not
				// the host of the URL client-go built.
				host := r.Host
				if strings.HasPrefix(host, "127.0.0.1:") {
					host = "endpoint"
				}
				fmt.Fprintf(w, "%s %s %s", r.Method, b, host)
			}), false)
			var p *proxytest.Picker
			switch {
			case tc.noEndpoint:
				p = proxytest.NewPicker()
			case tc.deadFirst:
				p = proxytest.NewPicker(dead, good)
			default:
				p = proxytest.NewPicker(good)
			}
			u := proxytest.NewUpstream()
			u.Set(good, rt)
			u.Set(dead, unprocessed)
			m, _ := NewMetrics(nil)
			h := New(Config{}, p, u, m)

			body := &trackedBody{Reader: strings.NewReader(tc.body)}
			req, _ := http.NewRequest(tc.method, "https://example.invalid:6443/api/v1/namespaces/ns/configmaps", nil)
			if tc.body != "" {
				req.Body = body
				if !tc.unknownLen {
					req.ContentLength = int64(len(tc.body))
				}
			}
			if tc.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			}
			resp, err := h.RoundTripper().RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if resp.Request != req {
				t.Errorf("resp.Request is not the caller's request")
			}
			if tc.wantStatus == 200 {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != tc.wantBody {
					t.Errorf("apiserver saw %q, want %q", b, tc.wantBody)
				}
			} else {
				st := testkit.ReadStatus(t, resp)
				if st.Reason != tc.wantReason {
					t.Errorf("reason = %q, want %q", st.Reason, tc.wantReason)
				}
				if tc.wantStatus == 503 && resp.Header.Get("Retry-After") == "" {
					t.Errorf("503 without Retry-After: client-go would not retry it")
				}
			}
			if tc.body != "" && !body.closed.Load() {
				t.Errorf("request body not closed")
			}
			if got := len(p.Records()); got != tc.wantPicks {
				t.Errorf("picks = %d, want %d", got, tc.wantPicks)
			}
			p.CheckDoneOnce(t)
			if got := counterValue(t, m.requests.WithLabelValues("short", fmt.Sprint(tc.wantStatus), map[bool]string{true: good, false: ""}[tc.wantStatus == 200])); got != 1 {
				t.Errorf("fanout_requests_total{code=%d} = %v, want 1", tc.wantStatus, got)
			}
		})
	}
}

// TestRoundTripperWatchAndStop: a watch counts as open long-running until
// its body is closed, StopLongRunning ends it with a clean EOF, and later
// requests fail with ErrStopped.
func TestRoundTripperWatchAndStop(t *testing.T) {
	gone := make(chan struct{})
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	m, _ := NewMetrics(nil)
	// With a rebalancer, a watch with initial events goes out without
	// Accept-Encoding (watch.Hook.Prepare).
	r, err := fwatch.NewRebalancer(fwatch.RebalanceConfig{}, noLoads{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Rebalancer: r}, p, u, m)
	client := &http.Client{Transport: h.RoundTripper()}

	req, err := http.NewRequest(http.MethodGet, "https://ignored.invalid/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// The watch hook drops Accept-Encoding from what it sends; a
	// RoundTripper must leave the caller's request as it was.
	if got := req.Header.Get("Accept-Encoding"); got != "gzip" {
		t.Errorf("the caller's Accept-Encoding is %q after RoundTrip, want gzip", got)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, m.openLong); got != 1 {
		t.Errorf("open long-running = %v during the watch, want 1", got)
	}
	if picks := p.Records(); len(picks) != 1 || picks[0].Info.Kind != balancer.Long {
		t.Errorf("picks = %+v, want one Long pick", picks)
	}
	h.StopLongRunning()
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("watch after stop: %q, %v; want a clean EOF", rest, err)
	}
	resp.Body.Close()
	testkit.Wait(t, gone, "the apiserver side of the stopped watch")
	if got := gaugeValue(t, m.openLong); got != 0 {
		t.Errorf("open long-running = %v after the watch ended, want 0", got)
	}
	p.CheckDoneOnce(t)

	if _, err := client.Get("https://ignored.invalid/api/v1/pods"); !errors.Is(err, ErrStopped) {
		t.Errorf("request after stop: %v, want ErrStopped", err)
	}
}

// TestRoundTripperCanceled: a request whose context ends gets its
// context's error, not a Status nobody asked for.
func TestRoundTripperCanceled(t *testing.T) {
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	h := New(Config{}, p, u, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://x.invalid/api/v1/pods/a", nil)
	go cancel()
	resp, err := h.RoundTripper().RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("canceled request: status %d, want an error", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	p.CheckDoneOnce(t)
}
