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
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// TestOneClassification: the limits and the handler act on the
// classification in the request context (withRequestState, at the edge)
// and parse nothing themselves. A context that says "long-running list"
// for the path of a short GET shows which one they used.
func TestOneClassification(t *testing.T) {
	const addr = "10.0.0.1:6443"
	p := newFakePicker(addr)
	u := newFakeUpstream()
	u.set(addr, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	}))
	m, _ := NewMetrics(nil)
	h := New(Config{}, p, u, m)
	var longInflight float64
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		longInflight = testutil.ToFloat64(m.limits.inflight.WithLabelValues(balancer.Long.String()))
		h.ServeHTTP(w, r)
	})
	limited := withLimits(inner, 10, 10, time.Minute, time.Now, m.limits)

	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/configmaps/x", nil)
	info := classify(reqinfo.New(req))
	if info.Kind != balancer.Short || info.Class != balancer.ClassGet {
		t.Fatalf("classify(reqinfo.New) = %+v, want a short get (the test relies on it)", info)
	}
	info.Kind, info.Class = balancer.Long, balancer.ClassList
	rec := httptest.NewRecorder()
	limited.ServeHTTP(rec, req.WithContext(context.WithValue(req.Context(), stateKey{}, &reqState{classified: info, start: time.Now()})))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if longInflight != 1 {
		t.Errorf("long-running requests in flight while served = %v, want 1: the limits classified the request again", longInflight)
	}
	recs := p.records()
	if len(recs) != 1 || recs[0].info.Kind != balancer.Long || recs[0].info.Class != balancer.ClassList {
		t.Fatalf("picks = %+v, want one long-running list pick: the handler classified the request again", recs)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("long", "200", addr)); v != 1 {
		t.Errorf("fanout_requests_total{kind=long,code=200} = %v, want 1: metrics classified the request again", v)
	}
}

// TestEdgeClassifies: the Server's chain starts with withRequestState,
// which puts the request's one classification in its context.
func TestEdgeClassifies(t *testing.T) {
	var got *reqState
	edge := withRequestState(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, _ = r.Context().Value(stateKey{}).(*reqState)
	}), time.Now)
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/pods/p/exec?command=sh", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "SPDY/3.1")
	edge.ServeHTTP(nil, r)
	if want := classify(reqinfo.New(r)); got == nil || got.classified != want || got.start.IsZero() {
		t.Fatalf("state in the context = %+v, want %+v and a start time", got, want)
	}
}
