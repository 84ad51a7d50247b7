package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
)

// stateLogInterval is how often endpoint states are compared. Ejections
// last seconds at least, so a second catches them; a flap shorter than
// that shows in fanout_endpoint_errors_total, not in the log.
const stateLogInterval = time.Second

// endpointStates is the balancer's snapshot, as the state log reads it.
type endpointStates interface {
	Endpoints() []balancer.EndpointStatus
}

// logEndpointStates logs ejections and recoveries of endpoints, one line
// per change, by comparing the balancer's snapshots every interval until
// ctx ends. Added and removed endpoints are logged by the resolver loop
// ("endpoints updated") and readiness changes by the prober, so they are
// not repeated here.
func logEndpointStates(ctx context.Context, state endpointStates, log *slog.Logger, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	prev := state.Endpoints()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := state.Endpoints()
		logTransitions(log, prev, cur)
		prev = cur
	}
}

// logTransitions logs each endpoint of cur that became ejected, or stopped
// being ejected, since prev.
func logTransitions(log *slog.Logger, prev, cur []balancer.EndpointStatus) {
	before := make(map[string]balancer.EndpointStatus, len(prev))
	for _, e := range prev {
		before[e.Address] = e
	}
	for _, e := range cur {
		p, ok := before[e.Address]
		if !ok {
			continue
		}
		wasEjected, isEjected := p.EjectedUntil != "", e.EjectedUntil != ""
		switch {
		case isEjected && (!wasEjected || p.EjectedUntil != e.EjectedUntil):
			log.Warn("endpoint ejected: no new requests until the deadline", "endpoint", e.Address,
				"until", e.EjectedUntil, "consecutive_failures", e.ConsecutiveFailures, "errors_total", e.ErrorsTotal)
		case wasEjected && !isEjected:
			log.Info("endpoint back from ejection", "endpoint", e.Address, "state", e.State)
		}
	}
}
