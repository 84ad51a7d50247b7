package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/logging"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// BenchmarkServeShort measures the proxy's own cost per short request:
// classification, pick, rewrite, Done and the Status-free happy path, with
// an in-memory upstream so no network time is counted.
func BenchmarkServeShort(b *testing.B) { benchServeShort(b, Config{}) }

// BenchmarkServeShortCost is BenchmarkServeShort reporting to a cost
// table: the difference is the table's cost per request (docs/cost.md).
func BenchmarkServeShortCost(b *testing.B) {
	tab, err := cost.New(cost.Config{Size: cost.DefaultSize, MetricsTop: cost.DefaultMetricsTop})
	if err != nil {
		b.Fatal(err)
	}
	benchServeShort(b, Config{Cost: tab})
}

// BenchmarkServeShortLogged is BenchmarkServeShort with the process
// logger of -v 0 (the line per request off) and of -v 4 (on, written as
// JSON to io.Discard): what the line per request costs
// (docs/troubleshooting.md).
func BenchmarkServeShortLogged(b *testing.B) {
	for _, v := range []int{0, logging.RequestVerbosity} {
		b.Run(fmt.Sprintf("v=%d", v), func(b *testing.B) {
			benchServeShort(b, Config{Log: logging.New("json", v, io.Discard)})
		})
	}
}

func benchServeShort(b *testing.B, cfg Config) {
	const addr = "10.0.0.1:6443"
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), ContentLength: 2, Request: r}, nil
	}))
	h := New(cfg, p, u, nil)
	req := httptest.NewRequest("GET", "/api/v1/namespaces/kube-system/configmaps/x", nil)
	req.Header.Set("User-Agent", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/replicaset-controller")
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
		p.Forget() // keep the records from growing
		u.Forget()
	}
}

// BenchmarkServeShortChain is BenchmarkServeShort through the Server's
// whole handler chain (classification, limits, the open-proxy and Host
// checks), as the loopback listener serves it. The chain differs by
// server of plaintext HTTP/1.1 (--h1-server) in one filter: with std an
// HTTP/1.1 request takes its header's size from the header budget.
func BenchmarkServeShortChain(b *testing.B) {
	const addr = "10.0.0.1:6443"
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), ContentLength: 2, Request: r}, nil
	}))
	for _, h1 := range []string{listener.H1ServerOwn, listener.H1ServerStd} {
		b.Run("h1-server="+h1, func(b *testing.B) {
			s := listener.New(listener.Config{H1Server: h1}, New(Config{}, p, u, nil), nil)
			req := httptest.NewRequest("GET", "/api/v1/namespaces/kube-system/configmaps/x", nil)
			req.RequestURI = req.URL.RequestURI()
			req.Host = "127.0.0.1:7080"
			b.ReportAllocs()
			for b.Loop() {
				s.Handler().ServeHTTP(httptest.NewRecorder(), req)
				p.Forget() // keep the records from growing
				u.Forget()
			}
		})
	}
}
