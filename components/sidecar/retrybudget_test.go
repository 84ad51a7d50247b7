package sidecar

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/resolver"
)

// shuttingDown is an upstream whose every apiserver answers kube-apiserver's
// 429 "shutting down", which the proxy retries on another endpoint while
// the budget allows.
type shuttingDown struct{}

func (shuttingDown) For(string, transport.AuthMode) http.RoundTripper { return shuttingDown{} }

func (shuttingDown) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header:     http.Header{"Retry-After": {"1"}},
		Body:       io.NopCloser(strings.NewReader("The apiserver is shutting down, please try again later.")),
		Request:    r,
	}, nil
}

// TestRetryBudgetFlag parses the retry-budget flags as the binary does and
// counts the retries of a proxy built from them: --retry-budget 0 allows
// --retry-budget-min retries and no more, whatever the request count, and
// the defaults allow 10% of the requests plus 10.
func TestRetryBudgetFlag(t *testing.T) {
	const requests = 40
	for _, tc := range []struct {
		args []string
		want float64
	}{
		{[]string{"--retry-budget", "0", "--retry-budget-min", "2"}, 2},
		{[]string{"--retry-budget=0.5", "--retry-budget-min=1"}, 1 + 0.5*requests},
		{nil, proxy.DefaultRetryBudgetMin + proxy.DefaultRetryBudgetRatio*requests},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewConfig()
			fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(append([]string{"--kubeconfig", "/dev/null"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			b, err := balancer.New(balancer.Recommended(""))
			if err != nil {
				t.Fatal(err)
			}
			b.Update([]resolver.Endpoint{{Address: "192.0.2.1:6443"}, {Address: "192.0.2.2:6443"}})
			reg := prometheus.NewRegistry()
			m, err := proxy.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			cfg := o.Engine.Proxy
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			h := proxy.New(cfg, b, shuttingDown{}, m)
			for range requests {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/api/v1/pods", nil))
				if rec.Code != http.StatusTooManyRequests {
					t.Fatalf("status %d, want the apiservers' 429", rec.Code)
				}
			}
			var retried float64
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range families {
				if mf.GetName() == "fanout_retries_total" {
					for _, s := range mf.GetMetric() {
						retried += s.GetCounter().GetValue()
					}
				}
			}
			if retried != tc.want {
				t.Errorf("%d requests made %v retries, want %v", requests, retried, tc.want)
			}
		})
	}
}
