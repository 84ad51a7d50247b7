package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/e2e/harness"
)

// shutdownArgs make the apiservers shut down the way a careful rollout
// does (the same as e2e/resilience_test.go): /readyz fails at once,
// requests are still served for 5 s, and after that every new request gets
// a 429 with Retry-After rather than a refused connection.
var shutdownArgs = []string{"--shutdown-delay-duration=5s", "--shutdown-send-retry-after=true"}

// Phases of an apiserver in the table.
const (
	phaseUp       = "up"
	phaseStopping = "stopping"
	phaseDown     = "down"
	phaseStarting = "starting"
)

// roller restarts the apiservers one at a time, gracefully, as a rollout of
// a new kube-apiserver version does, and records each one's phase for the
// table.
type roller struct {
	cp      *harness.ControlPlane
	admin   string // fanout's admin address, to see when it uses an apiserver again
	clients []*client
	ev      *events

	mu      sync.Mutex
	running bool
	status  string // what the roll does now, for the table's header
	phases  []string
}

func newRoller(cp *harness.ControlPlane, adminAddr string, clients []*client, ev *events) *roller {
	phases := make([]string, len(cp.APIServers))
	for i := range phases {
		phases[i] = phaseUp
	}
	return &roller{cp: cp, admin: adminAddr, clients: clients, ev: ev, phases: phases}
}

// start begins a roll in the background unless one is running; wg tracks
// it so the demo can wait for it before tearing down.
func (r *roller) start(ctx context.Context, wg *sync.WaitGroup, why string) {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		r.ev.add("a rolling restart is already running")
		return
	}
	r.running = true
	r.mu.Unlock()
	wg.Go(func() {
		defer func() {
			r.mu.Lock()
			r.running, r.status = false, ""
			r.mu.Unlock()
		}()
		if err := r.roll(ctx, why); err != nil && ctx.Err() == nil {
			r.ev.add("rolling restart failed: %v", err)
		}
	})
}

func (r *roller) setPhase(i int, phase, status string) {
	r.mu.Lock()
	r.phases[i], r.status = phase, status
	r.mu.Unlock()
}

// snapshot returns the phases and what the roll is doing ("" when idle).
func (r *roller) snapshot() ([]string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.phases...), r.status
}

// roll restarts every apiserver in turn. After each start it waits until
// fanout uses the apiserver again and then a little longer, so the table
// shows the watches and requests coming back before the next one goes.
func (r *roller) roll(ctx context.Context, why string) error {
	n := len(r.cp.APIServers)
	r.ev.add("rolling restart of the %d apiservers, one at a time (%s)", n, why)
	before := make([]counts, len(r.clients))
	for i, c := range r.clients {
		before[i] = c.counts()
	}
	began := time.Now()
	for k, a := range r.cp.APIServers {
		name := fmt.Sprintf("apiserver %d", a.Index+1)
		step := fmt.Sprintf("rolling restart %d/%d: ", k+1, n)

		r.setPhase(a.Index, phaseStopping, step+name+" stopping (SIGTERM; serves 5 s more)")
		r.ev.add("%s: SIGTERM", name)
		from := time.Now()
		if err := a.Stop(); err != nil {
			return fmt.Errorf("stopping %s: %w", name, err)
		}
		r.setPhase(a.Index, phaseDown, step+name+" is down")
		r.ev.add("%s exited %s after SIGTERM", name, time.Since(from).Round(100*time.Millisecond))
		// Down for a moment, as between the old pod and the new one.
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}

		r.setPhase(a.Index, phaseStarting, step+name+" is starting")
		if err := a.Start(ctx); err != nil {
			return fmt.Errorf("starting %s again: %w", name, err)
		}
		r.setPhase(a.Index, phaseUp, step+name+" ready; waiting for fanout's probe")
		r.ev.add("%s ready %s after its start", name, a.ReadyAt().Sub(a.StartedAt()).Round(100*time.Millisecond))
		if err := r.waitFanoutReady(ctx, a); err != nil {
			return err
		}
		next := "the next one in 10 s"
		if k == n-1 {
			next = "done in 10 s"
		}
		r.setPhase(a.Index, phaseUp, step+name+" back in fanout's rotation; "+next)
		if err := sleep(ctx, 10*time.Second); err != nil {
			return err
		}
	}
	r.ev.add("rolling restart done in %s", time.Since(began).Round(time.Second))
	for i, c := range r.clients {
		d := c.counts()
		r.ev.add("  %s during the roll: %d failed requests, %d re-lists", c.label, d.failed-before[i].failed, d.relists-before[i].relists)
	}
	return nil
}

// waitFanoutReady waits until fanout reports a's endpoint ready (its
// readiness probe passed), for at most a minute: the demo goes on either
// way, and says so.
func (r *roller) waitFanoutReady(ctx context.Context, a *harness.APIServer) error {
	addr := strings.TrimPrefix(a.URL, "https://")
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		snap, err := admin.FetchSnapshot(ctx, hc, r.admin)
		if err == nil {
			for _, e := range snap.Endpoints {
				if e.Address == addr && e.State == balancer.StateReady {
					return nil
				}
			}
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	r.ev.add("fanout does not report apiserver %d ready a minute after it started; going on", a.Index+1)
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
