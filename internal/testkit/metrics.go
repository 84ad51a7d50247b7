package testkit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Registry returns a pedantic registry of cs, to read with Series as
// /metrics would serve them.
func Registry(t testing.TB, cs ...prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	return reg
}

// Series returns the value of the first series called name that g
// gathers whose labels include labels (a counter's or a gauge's value, a
// histogram's count of samples), and whether there is one.
func Series(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
