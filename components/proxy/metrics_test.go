package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	return testutil.ToFloat64(g)
}

// TestMetrics runs a few requests through a proxy with a registry and
// compares the exported series.
func TestMetrics(t *testing.T) {
	good, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/missing" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "ok")
	}), false)
	const dead = "192.0.2.1:6443"
	p := proxytest.NewPicker(dead, good)
	u := proxytest.NewUpstream()
	u.Set(good, rt)
	var calls atomic.Int32
	u.Set(dead, testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			return nil, &transport.UnprocessedError{Endpoint: dead, Err: errors.New("connection refused")}
		}
		return nil, errors.New("connection reset by peer")
	}))
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, base := startProxy(t, Config{}, p, u, m)
	client := testkit.NewClient(t, false)
	for _, path := range []string{"/api/v1/pods", "/api/v1/pods"} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	p.Remove(p.Addrs()[0]) // only the good one left
	resp, err := client.Get(base + "/api/v1/missing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// First request: unprocessed on dead, retried, 200 from good. Second:
	// a broken connection on dead, retried as a read, 200 from good.
	// Third: 404 from good. fanout's own 503s exist from the start, at 0.
	want := `
# HELP fanout_requests_total Requests answered by the proxy, by kind (short, long), HTTP status code and kube-apiserver endpoint (empty when none was picked).
# TYPE fanout_requests_total counter
fanout_requests_total{code="200",endpoint="` + good + `",kind="short"} 2
fanout_requests_total{code="404",endpoint="` + good + `",kind="short"} 1
fanout_requests_total{code="503",endpoint="",kind="long"} 0
fanout_requests_total{code="503",endpoint="",kind="short"} 0
# HELP fanout_retries_total Requests sent again, by reason: unprocessed (the apiserver never received it), read (a GET whose connection broke or timed out before the response), shutdown (it answered that it is shutting down), overload (priority and fairness rejected it and another endpoint was not overloaded), throttled (any other 429), gone (a watch whose first event was a 410, moved to another endpoint), unauthorized (a 401 to the client certificate, sent again to the same endpoint on fresh connections after re-reading the credentials), skew (a 404 saying the apiserver serves no such path, sent to one that serves it).
# TYPE fanout_retries_total counter
fanout_retries_total{reason="gone"} 0
fanout_retries_total{reason="overload"} 0
fanout_retries_total{reason="read"} 1
fanout_retries_total{reason="shutdown"} 0
fanout_retries_total{reason="skew"} 0
fanout_retries_total{reason="throttled"} 0
fanout_retries_total{reason="unauthorized"} 0
fanout_retries_total{reason="unprocessed"} 1
# HELP fanout_upstream_errors_total Round trips to kube-apiserver that failed without a response, by endpoint and reason (unprocessed, timeout, canceled, other).
# TYPE fanout_upstream_errors_total counter
fanout_upstream_errors_total{endpoint="` + dead + `",reason="other"} 1
fanout_upstream_errors_total{endpoint="` + dead + `",reason="unprocessed"} 1
# HELP fanout_open_long_running_requests Long-running requests (watch, logs, exec, proxy) currently open.
# TYPE fanout_open_long_running_requests gauge
fanout_open_long_running_requests 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fanout_requests_total", "fanout_retries_total", "fanout_upstream_errors_total", "fanout_open_long_running_requests"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.duration, "fanout_request_duration_seconds"); n != 1 {
		t.Errorf("duration series = %d, want 1 (kind=short)", n)
	}
	if got := histogramCount(t, reg, "fanout_request_duration_seconds"); got != 3 {
		t.Errorf("duration observations = %d, want 3", got)
	}

	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice succeeded, want an error")
	}
}

func histogramCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func TestErrorReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&transport.UnprocessedError{Endpoint: "a", Err: errors.New("refused")}, reasonUnprocessed},
		{&transport.UnprocessedError{Endpoint: "a", Err: errTimeout}, reasonUnprocessed},
		{errTimeout, reasonTimeout},
		{errCanceled, reasonCanceled},
		{errors.New("boom"), reasonOther},
	}
	for _, tc := range tests {
		if got := errorReason(tc.err); got != tc.want {
			t.Errorf("errorReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

var (
	errTimeout  = fmt.Errorf("awaiting headers: %w", context.DeadlineExceeded)
	errCanceled = fmt.Errorf("reading: %w", context.Canceled)
)
