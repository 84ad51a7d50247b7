package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestGracefulRestartUnderLoad restarts one apiserver the way a rolling
// upgrade does (SIGTERM, then start again) while a client keeps sending
// requests through fanout. An apiserver that is shutting down says so before
// processing anything, so fanout can move every request elsewhere: the
// client must see no error at all, and the restarted apiserver must get
// traffic again once it is back.
func TestGracefulRestartUnderLoad(t *testing.T) {
	// Its own control plane, as the restarted apiserver would skew the
	// spread tests' shares on the shared one.
	ctx, cp := ownControlPlane(t, 10*time.Minute, harness.Options{})
	const user = "e2e-restart-client"
	userNamespace(ctx, t, cp, "e2e-restart", user)
	sidecar := userFanout(ctx, t, cp, user)
	load := startLoad(ctx, t, sidecar.Config, "e2e-restart", "r")
	victim := cp.APIServers[len(cp.APIServers)-1]
	// An operator watching the sidecar sees the share move.
	status := startStatusWatch(ctx, t, cp, sidecar)

	time.Sleep(5 * time.Second)
	stopStart := restartGracefully(ctx, t, victim)
	// fanout probes readiness on its own schedule; give it time to notice
	// and to let traffic back in.
	time.Sleep(15 * time.Second)
	load.Stop()
	checkStatusFollowsRestart(t, status, strings.TrimPrefix(victim.URL, "https://"), stopStart, victim.ReadyAt(), time.Now())
	started, ready := victim.StartedAt(), victim.ReadyAt()
	// Before /readyz passes an apiserver may answer wrongly (RBAC not yet
	// synced gives 403s), so nothing may reach it then; a second of slack
	// covers the harness's polling.
	early := servedBetween(t, cp, victim, user, started, ready.Add(-time.Second))
	late := servedBetween(t, cp, victim, user, ready, time.Now())

	counts, err := cp.ServedPerAPIServer(harness.UserIs(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests sent, %d cycles failed; served overall: %s; after its restart apiserver %d served %d before ready and %d after",
		load.sent.Load(), load.failed.Load(), harness.FormatShares(counts), victim.Index+1, early, late)
	load.reportErrors(t)
	if early > 0 {
		t.Errorf("apiserver %d served %d of %s's requests after its restart but before its /readyz passed (%s later): fanout must send only to ready apiservers",
			victim.Index+1, early, user, ready.Sub(started).Round(time.Millisecond))
	}
	if late == 0 {
		t.Errorf("apiserver %d served nothing in the 15 s after it was ready again: fanout did not take it back", victim.Index+1)
	}
}

// restartGracefully restarts victim the way a rolling upgrade does:
// SIGTERM, down for 3 s, started again and ready; it logs how long each
// step took and returns when the stop began.
func restartGracefully(ctx context.Context, t *testing.T, victim *harness.APIServer) time.Time {
	t.Helper()
	stopStart := time.Now()
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver %d stopped gracefully in %s", victim.Index+1, time.Since(stopStart).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver %d ready again %s after the stop began (%s after its start)",
		victim.Index+1, time.Since(stopStart).Round(time.Millisecond), victim.ReadyAt().Sub(victim.StartedAt()).Round(time.Millisecond))
	return stopStart
}
