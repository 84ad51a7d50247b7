package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/resolver"
)

// oneUpstream serves every endpoint with one RoundTripper, without the
// fake's recording (which allocates).
type oneUpstream struct{ rt http.RoundTripper }

func (u oneUpstream) For(string, transport.AuthMode) http.RoundTripper { return u.rt }

// BenchmarkServeShortBalancer is BenchmarkServeShort with the real
// least-request balancer over three endpoints instead of the recording
// fake, so that its allocations are the sidecar's own: the fake allocates
// to record each pick, the balancer must not (see
// balancer.TestPickDoesNotAllocate).
func BenchmarkServeShortBalancer(b *testing.B) {
	addrs := []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}
	bal, err := balancer.New(balancer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var eps []resolver.Endpoint
	for _, a := range addrs {
		eps = append(eps, resolver.Endpoint{Address: a})
	}
	bal.Update(eps)
	rt := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), ContentLength: 2, Request: r}, nil
	})
	h := New(Config{}, bal, oneUpstream{rt}, nil)
	req := httptest.NewRequest("GET", "/api/v1/namespaces/kube-system/configmaps/x", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, s := range bal.Endpoints() {
		if s.InflightShort != 0 {
			b.Fatalf("%s: %d requests still in flight after the loop: Done was not called", s.Address, s.InflightShort)
		}
	}
}
