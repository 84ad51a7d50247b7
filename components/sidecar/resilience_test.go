package sidecar

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/engine"
)

// The sidecar's engine runs the prober over pools of its own (checked in
// package engine), and it probes every endpoint.
func TestSidecarProbesEveryEndpoint(t *testing.T) {
	var e *engine.Engine
	f := startSidecar(t, "", "least-request", fx.Populate(&e))
	if parts := e.Parts(); !slices.Contains(parts, engine.PartProber) || !slices.Contains(parts, engine.PartProbeTransports) {
		t.Fatalf("the sidecar's engine runs %v, want the prober and its own pools", parts)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range f.servers {
		for s.Probes.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if s.Probes.Load() == 0 {
			t.Errorf("%s was never probed", s.URL)
		}
	}
}

// TestResilienceFlagsReachTheComponents: the defaults are the library's
// (engine.Defaults), and each flag lands in the part it configures.
func TestResilienceFlagsReachTheComponents(t *testing.T) {
	if d := NewConfig(); !reflect.DeepEqual(d.Engine, engine.Defaults()) {
		t.Errorf("the sidecar's engine defaults %+v, want engine.Defaults() %+v", d.Engine, engine.Defaults())
	}
	o := parseFlags(t, "--balancer", "round-robin", "--slow-start", "3s", "--outlier-consecutive-failures", "7",
		"--max-ejected-fraction", "0.5", "--retry-budget", "0.2", "--retry-budget-min", "4", "--probe-rise", "3", "--probe-fall", "4",
		"--probe-interval", "5s", "--watch-rebalance-rate", "6", "--watch-rebalance-tolerance", "0.7", "--tls-server-name", "api.example")
	b := o.Engine.Balancer
	if b.Policy != "round-robin" || b.SlowStart != 3*time.Second || b.ConsecutiveFailures != 7 || b.MaxEjectedFraction != 0.5 {
		t.Errorf("balancer config from flags = %+v", b)
	}
	if r := *o.Engine.Proxy.RetryBudget; r.Ratio != 0.2 || r.Min != 4 {
		t.Errorf("retry budget from flags = %+v", r)
	}
	if p := o.Engine.Probe; p.Rise != 3 || p.Fall != 4 || p.Interval != 5*time.Second {
		t.Errorf("probe config from flags = %+v", p)
	}
	if r := o.Engine.Rebalance; r.Rate != 6 || r.Tolerance != 0.7 || !o.Engine.WatchRebalance {
		t.Errorf("rebalance config from flags = %+v (on: %v)", r, o.Engine.WatchRebalance)
	}
	if o.Engine.Transport.ServerName != "api.example" {
		t.Errorf("TLS server name from flags = %q", o.Engine.Transport.ServerName)
	}
}
