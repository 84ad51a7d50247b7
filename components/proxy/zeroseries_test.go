package proxy

import (
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
