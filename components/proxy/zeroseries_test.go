package proxy

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/watch"
)

type noLoads struct{}

func (noLoads) WatchLoads() []balancer.WatchLoad { return nil }

// TestKnownSeriesStartAtZero gathers a fresh registry, before any request,
// and expects every series whose label values are known to be there at 0:
// the shipped PrometheusRule and Grafana dashboard see nothing of a series
// until it exists. The label values are spelled out here, not taken from
// the code's constants, because the alerts and dashboards spell them so.
func TestKnownSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := watch.NewRebalancer(watch.RebalanceConfig{}, noLoads{}, reg); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, reason := range []string{"unprocessed", "read", "shutdown", "overload", "throttled", "gone", "unauthorized", "skew"} {
		want["fanout_retries_total"] = append(want["fanout_retries_total"], "reason="+reason)
		want["fanout_retry_budget_exhausted_total"] = append(want["fanout_retry_budget_exhausted_total"], "reason="+reason)
	}
	want["fanout_upgraded_connections"] = []string{"protocol=spdy", "protocol=websocket", "protocol=other"}
	want["fanout_watch_rebalanced_total"] = []string{"framing=json", "framing=protobuf"}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, mf := range families {
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 {
				continue
			}
			l := m.GetLabel()[0]
			v := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				v = m.GetGauge().GetValue()
			}
			series[l.GetName()+"="+l.GetValue()] = v
		}
		got[mf.GetName()] = series
	}
	for name, labels := range want {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(labels) {
			t.Errorf("%s has %d series before any event, want %d (%v): got %v", name, n, len(labels), labels, got[name])
		}
		for _, l := range labels {
			v, ok := got[name][l]
			switch {
			case !ok:
				t.Errorf("%s{%s} is missing from a fresh registry; initialise it with WithLabelValues when the collector is made", name, l)
			case v != 0:
				t.Errorf("%s{%s} = %v before any event, want 0", name, l, v)
			}
		}
	}
}

// TestUpstreamErrorSeriesFollowEndpoints: fanout_upstream_errors_total
// has a series per reason for each endpoint of the set from the moment
// it is known, and none for one that left it.
func TestUpstreamErrorSeriesFollowEndpoints(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	count := func() map[string]int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, mf := range mfs {
			if mf.GetName() != "fanout_upstream_errors_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "endpoint" {
						per[l.GetValue()]++
					}
				}
			}
		}
		return per
	}
	m.Retain([]string{"10.0.0.1:6443", "10.0.0.2:6443"})
	if got := count(); got["10.0.0.1:6443"] != 4 || got["10.0.0.2:6443"] != 4 || len(got) != 2 {
		t.Errorf("after the first snapshot: series per endpoint %v, want 4 (unprocessed, timeout, canceled, other) for each of the two", got)
	}
	m.upstreamError("10.0.0.2:6443", context.DeadlineExceeded)
	m.Retain([]string{"10.0.0.2:6443", "10.0.0.3:6443"})
	if got := count(); got["10.0.0.2:6443"] != 4 || got["10.0.0.3:6443"] != 4 || len(got) != 2 {
		t.Errorf("after 10.0.0.1 left and 10.0.0.3 came: series per endpoint %v, want 4 for each of 10.0.0.2 and 10.0.0.3", got)
	}
	if v := testutil.ToFloat64(m.upstreamErrors.WithLabelValues("10.0.0.2:6443", "timeout")); v != 1 {
		t.Errorf("the staying endpoint's timeout count is %v after another snapshot, want 1 (kept)", v)
	}
}
