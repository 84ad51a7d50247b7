package components

import (
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/transport"
)

// The prober must not share fate with client traffic: it gets a pool set
// of its own, and it still probes every endpoint through it.
func TestProberHasItsOwnTransport(t *testing.T) {
	var up health.Upstream
	var client *transport.Transports
	f := startSidecar(t, "", "least-request", fx.Populate(&up, &client))
	probe, ok := up.(*ProbeTransports)
	if !ok {
		t.Fatalf("the prober's Upstream is %T, want *ProbeTransports", up)
	}
	if probe.Transports == client {
		t.Fatal("the prober uses the client's transport pools")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range f.servers {
		for s.probes.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if s.probes.Load() == 0 {
			t.Errorf("%s was never probed", s.srv.URL)
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
