package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestOneClassification: the handler acts on the classification in the
// request context (reqinfo.WithRequest, made by the listener at its edge)
// and parses nothing itself. A context that says "long-running list"
// for the path of a short GET shows which one they used.
func TestOneClassification(t *testing.T) {
	const addr = "10.0.0.1:6443"
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	}))
	m, _ := NewMetrics(nil)
	h := New(Config{}, p, u, m)

	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/configmaps/x", nil)
	info := reqinfo.New(req)
	if info.LongRunning || info.Verb != "get" {
		t.Fatalf("reqinfo.New = %+v, want a short get (the test relies on it)", info)
	}
	info.LongRunning, info.Verb = true, "list"
	rec := httptest.NewRecorder()
	ctx, ri := reqinfo.WithRequest(req.Context(), info, time.Now())
	h.ServeHTTP(rec, req.WithContext(ctx))
	ri.End()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	recs := p.Records()
	if len(recs) != 1 || recs[0].Info.Kind != balancer.Long || recs[0].Info.Class != balancer.ClassList {
		t.Fatalf("picks = %+v, want one long-running list pick: the handler classified the request again", recs)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("long", "200", addr)); v != 1 {
		t.Errorf("fanout_requests_total{kind=long,code=200} = %v, want 1: metrics classified the request again", v)
	}
}

// TestStateOnTheEdgesRequest: the handler hangs its view of the edge's
// classification (classify) on the request the edge made, with the start
// the edge read, and gives back what it held when the edge ends it.
func TestStateOnTheEdgesRequest(t *testing.T) {
	m, _ := NewMetrics(nil)
	h := New(Config{}, proxytest.NewPicker(), proxytest.NewUpstream(), m)
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/pods/p/exec?command=sh", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "SPDY/3.1")
	start := time.Unix(1e9, 0)
	ctx, req := reqinfo.WithRequest(context.Background(), reqinfo.New(r), start)
	h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	got, _ := req.HandlerState().(*reqState)
	if want := classify(reqinfo.New(r)); got == nil || got.classified != want || got.Request != req || !got.Start.Equal(start) {
		t.Fatalf("state on the request = %+v, want %+v on the edge's request and start %v", got, want, start)
	}
	if st, ok := stateOf(ctx); !ok || st != got {
		t.Errorf("stateOf(the request's context) = %p, %v; want the state on the request", st, ok)
	}
	req.End()
	if !req.Ended() {
		t.Error("the request did not end")
	}
}
