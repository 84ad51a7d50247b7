package sidecar

import (
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

func TestResilienceOptionsReachTheComponents(t *testing.T) {
	o := NewOptions()
	b := o.Resilience.balancer("round-robin")
	if b.Policy != "round-robin" || b.SlowStart != 10*time.Second || b.ConsecutiveFailures != 5 || b.MaxEjectedFraction != 1.0/3 {
		t.Errorf("balancer config from defaults = %+v", b)
	}
}
