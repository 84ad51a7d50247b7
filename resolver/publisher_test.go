package resolver

import (
	"bytes"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPublisher(t *testing.T) {
	type result struct {
		addrs []string
		err   error
	}
	ok := func(a ...string) result { return result{addrs: a} }
	fail := result{err: errors.New("boom")}
	tests := []struct {
		name     string
		fallback []string
		results  []result
		// want is one entry per result: what was published, nil for nothing.
		want       [][]string
		wantWarns  int
		wantInfos  int
		wantErrors float64
	}{
		{
			name:       "errors after a success keep the last set, logged once",
			fallback:   []string{"f:1"},
			results:    []result{ok("a:1"), fail, fail, ok(), ok("a:1"), fail, ok("b:1")},
			want:       [][]string{{"a:1"}, nil, nil, nil, nil, nil, {"b:1"}},
			wantWarns:  2, // two failure streaks
			wantInfos:  2, // two recoveries
			wantErrors: 4,
		},
		{
			name:       "fallback once until the first success",
			fallback:   []string{"f:1"},
			results:    []result{fail, fail, ok("a:1")},
			want:       [][]string{{"f:1"}, nil, {"a:1"}},
			wantWarns:  1,
			wantInfos:  1,
			wantErrors: 2,
		},
		{
			name:       "no fallback publishes nothing",
			results:    []result{fail, ok("a:1")},
			want:       [][]string{nil, {"a:1"}},
			wantWarns:  1,
			wantInfos:  1,
			wantErrors: 1,
		},
		{
			name:     "an unchanged set is not published again",
			fallback: []string{"f:1"},
			results:  []result{ok("f:1"), ok("f:1")},
			want:     [][]string{{"f:1"}, nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			var got [][]string
			m := NewMetrics()
			p := &publisher{
				name: "dns", metrics: m,
				log:    slog.New(slog.NewTextHandler(&logs, nil)),
				update: func(eps []Endpoint) { got = append(got, addresses(eps)) },
			}
			for _, a := range tt.fallback {
				p.fallback = append(p.fallback, Endpoint{Address: a})
			}
			for i, r := range tt.results {
				got = nil
				var eps []Endpoint
				for _, a := range r.addrs {
					eps = append(eps, Endpoint{Address: a})
				}
				p.result(eps, r.err)
				var want [][]string
				if tt.want[i] != nil {
					want = [][]string{tt.want[i]}
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("result %d: published %v, want %v", i, got, want)
				}
			}
			if n := strings.Count(logs.String(), "level=WARN"); n != tt.wantWarns {
				t.Errorf("%d warnings, want %d:\n%s", n, tt.wantWarns, logs.String())
			}
			if n := strings.Count(logs.String(), "level=INFO"); n != tt.wantInfos {
				t.Errorf("%d infos, want %d:\n%s", n, tt.wantInfos, logs.String())
			}
			if got := testutil.ToFloat64(m.errors.WithLabelValues("dns")); got != tt.wantErrors {
				t.Errorf("errors = %v, want %v", got, tt.wantErrors)
			}
		})
	}
}

// TestMetricsUpdate runs in a bubble for the time of the last success:
// the bubble's clock starts at 2000-01-01 00:00:00 UTC (Unix 946684800).
func TestMetricsUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics()
		m.Update([]Endpoint{{Address: "a:1"}, {Address: "b:1", Draining: true}, {Address: "c:1"}})
		time.Sleep(1500 * time.Second)
		m.succeeded("endpointslice")
		want := `
# HELP fanout_resolver_endpoints Endpoints in the last published snapshot by state (ready, or draining: terminating or not ready, taking no new requests).
# TYPE fanout_resolver_endpoints gauge
fanout_resolver_endpoints{state="draining"} 1
fanout_resolver_endpoints{state="ready"} 2
# HELP fanout_resolver_last_success_timestamp_seconds Unix time of the last resolution that found endpoints, by resolver; alert when it falls far behind.
# TYPE fanout_resolver_last_success_timestamp_seconds gauge
fanout_resolver_last_success_timestamp_seconds{resolver="endpointslice"} 946686300
`
		if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
			t.Error(err)
		}
	})
	var nilMetrics *Metrics // resolvers built without metrics
	nilMetrics.Update(nil)
	nilMetrics.failed("dns", errors.New("boom"), "nothing")
	nilMetrics.succeeded("dns")
	if healthy, detail := nilMetrics.Status(); !healthy || detail != "" {
		t.Errorf("nil Metrics Status() = %v, %q; want healthy and no detail", healthy, detail)
	}
}

// TestStatus follows a resolver through the publisher as it succeeds,
// fails for a while, and recovers: /readyz shows the detail meanwhile. It
// runs in a bubble, where time passes only as far as the test sleeps.
func TestStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics()
		p := &publisher{
			name: "endpointslice", metrics: m,
			fallback: []Endpoint{{Address: "f:1"}},
			log:      slog.New(slog.DiscardHandler),
			update:   func([]Endpoint) {},
		}
		eps := []Endpoint{{Address: "a:1"}, {Address: "b:1"}, {Address: "c:1"}}
		steps := []struct {
			name        string
			eps         []Endpoint
			err         error
			advance     time.Duration // before Status is asked
			wantHealthy bool
			wantDetail  string
		}{
			{name: "before any resolution", wantHealthy: true},
			{name: "first attempt fails", err: errors.New("forbidden"), advance: 2 * time.Second,
				wantDetail: "resolver endpointslice: last error 2s ago: forbidden; serving the kubeconfig's server, as nothing resolved yet"},
			{name: "resolved", eps: eps, wantHealthy: true},
			{name: "watch fails", err: errors.New("connection refused"), advance: 12 * time.Second,
				wantDetail: "resolver endpointslice: last error 12s ago: connection refused; serving the last known 3 endpoints"},
			{name: "empty result", eps: []Endpoint{}, advance: time.Second,
				wantDetail: "resolver endpointslice: last error 1s ago: resolved no endpoints; serving the last known 3 endpoints"},
			{name: "recovered", eps: eps[:2], wantHealthy: true},
		}
		for i, st := range steps {
			if i > 0 {
				p.result(st.eps, st.err)
			}
			time.Sleep(st.advance)
			healthy, detail := m.Status()
			if healthy != st.wantHealthy || detail != st.wantDetail {
				t.Errorf("%s: Status() = %v, %q; want %v, %q", st.name, healthy, detail, st.wantHealthy, st.wantDetail)
			}
		}
	})
}
