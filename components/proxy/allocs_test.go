package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/logging"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/resolver"
)

// Allocations per short request, fanout's and net/http's: the budgets are
// the figures measured when they were set (docs/footprint.md, "Allocations
// per short request"), so the test fails when a change adds one allocation
// to the short path; lower a budget when one is removed. Of the 14:
// httputil.ReverseProxy and net/http 11 (the outbound Request.Clone with
// its header and URL copies 5, ProxyRequest, the ClientTrace, its closure
// and mutex 4, WithClientTrace's context and request 2), fanout 3 (the
// context with the request's reqinfo.Request, the Request carrying it,
// the proxy's state with its first attempt's request). The
// request classifier (package reqinfo) allocates nothing; kube-apiserver's
// RequestInfoFactory, used until it was replaced, cost 3.
const (
	// allocsShortHandler is Handler.ServeHTTP served on its own: it
	// classifies the request itself, as the Server's edge would have.
	allocsShortHandler = 14
	// allocsShortChain is the Server's whole handler chain.
	allocsShortChain = 14
)

// recycledWriter is a ResponseWriter that costs nothing per request once
// its header map is grown, so that only the proxy's allocations count.
type recycledWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *recycledWriter) Header() http.Header         { return w.h }
func (w *recycledWriter) WriteHeader(code int)        { w.code = code }
func (w *recycledWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
func (w *recycledWriter) reset()                      { clear(w.h); w.code, w.n = 0, 0 }

// recycledBody is a response body that can be read again after reset.
type recycledBody struct{ strings.Reader }

func (*recycledBody) Close() error { return nil }

func TestShortRequestAllocations(t *testing.T) { testShortRequestAllocations(t, Config{}) }

// TestShortRequestAllocationsLogged: the process logger of -v 0 and -v 1
// (a real handler, not a discarding one) and the line per request, off
// below -v 4, cost a short request no allocation: the same budgets.
func TestShortRequestAllocationsLogged(t *testing.T) {
	for _, v := range []int{0, 1} {
		t.Run(fmt.Sprintf("-v %d", v), func(t *testing.T) {
			testShortRequestAllocations(t, Config{Log: logging.New("text", v, io.Discard)})
		})
	}
}

func testShortRequestAllocations(t *testing.T, cfg Config) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("the race detector and coverage instrumentation change allocations")
	}
	bal, err := balancer.New(balancer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bal.Update([]resolver.Endpoint{{Address: "10.0.0.1:6443"}, {Address: "10.0.0.2:6443"}})
	// The upstream answers with one response, reset for every request:
	// an in-memory apiserver that allocates nothing itself.
	const payload = `{"kind":"ConfigMap"}`
	body := &recycledBody{}
	resp := &http.Response{}
	rt := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		body.Reset(payload)
		clear(resp.Header)
		*resp = http.Response{StatusCode: 200, Header: resp.Header, Body: body, ContentLength: int64(len(payload)), Request: r}
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		return resp, nil
	})
	h := New(cfg, bal, oneUpstream{rt}, nil)
	s := listener.New(listener.Config{}, h, nil)

	// As client-go sends a GET.
	req := httptest.NewRequest("GET", "/api/v1/namespaces/kube-system/configmaps/x", nil)
	req.RequestURI = req.URL.RequestURI()
	req.Host = "127.0.0.1:7080"
	req.Header.Set("User-Agent", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abcdef")
	req.Header.Set("Accept", "application/json, */*")

	for _, tc := range []struct {
		name   string
		h      http.Handler
		budget float64
	}{
		{"handler", h, allocsShortHandler},
		{"server chain", s.Handler(), allocsShortChain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &recycledWriter{h: http.Header{}}
			serve := func() {
				w.reset()
				tc.h.ServeHTTP(w, req)
			}
			serve() // warm the pools
			if w.code != 200 || w.n != len(payload) {
				t.Fatalf("got status %d and %d body bytes, want 200 and %d: the request did not go through", w.code, w.n, len(payload))
			}
			got := testing.AllocsPerRun(200, serve)
			t.Logf("%.1f allocations per short request", got)
			if got > tc.budget {
				t.Errorf("a short request cost %.1f allocations, budget %.0f: find the new one with "+
					"go test -run xxx -bench 'BenchmarkServeShort$' -benchmem -memprofile /tmp/mem.out -memprofilerate 1 ./components/proxy/ "+
					"and go tool pprof -sample_index=alloc_objects -traces /tmp/mem.out", got, tc.budget)
			}
		})
	}
	for _, st := range bal.Endpoints() {
		if st.InflightShort != 0 {
			t.Errorf("%s: %d requests still in flight: Done was not called", st.Address, st.InflightShort)
		}
	}
}
