package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestWatchRebalance: every watch of two sidecars' informers is placed on
// two apiservers while the third is stopped; then it comes back. Through
// the sidecar with --watch-rebalance (the default) the watches must spread
// to 33% ± 10 points per apiserver within 3 minutes, as the apiservers'
// audit logs count them, with no re-list and no watch error; through the
// one with --watch-rebalance=false they must still be unbalanced then.
func TestWatchRebalance(t *testing.T) {
	ctx, cp := ownControlPlane(t, 20*time.Minute, harness.Options{APIServerArgs: shutdownArgs})
	const ns, userOn, userOff = "e2e-rebalance", "e2e-rebalance-on", "e2e-rebalance-off"
	userNamespace(ctx, t, cp, ns, userOn)
	grantConfigMaps(ctx, t, cp, ns, userOff)
	sidecars := map[string]*harness.Fanout{}
	for user, args := range map[string][]string{userOn: nil, userOff: {"--watch-rebalance=false"}} {
		sidecars[user] = userFanout(ctx, t, cp, user, args...)
	}

	// Not the first apiserver: the admin client talks to it directly.
	victim := cp.APIServers[len(cp.APIServers)-1]
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	// Let both sidecars' probes take it out (fall 2 × 2 s).
	time.Sleep(6 * time.Second)

	// A write a second keeps events flowing, as in any cluster with
	// controllers; each informer sees it. The writes pause while apiserver
	// 3 restarts and for quiet after it is ready, so that the informers'
	// last resourceVersion predates its watch cache: a watch moved then
	// would get 410 and re-list, which the rebalancer must not cause.
	// Writes to a Lease, which no informer watches, move the etcd revision
	// on meanwhile, as any cluster's do, so the restarted apiserver's watch
	// cache starts past the informers' last resourceVersion.
	const quiet = 20 * time.Second
	var writes sync.WaitGroup
	writesCtx, stopAllWrites := context.WithCancel(ctx)
	defer func() { stopAllWrites(); writes.Wait() }()
	writes.Go(func() { tickLease(writesCtx, t, cp, ns) })
	writeCtx, stopWrites := context.WithCancel(writesCtx)
	writes.Go(func() { tickConfigMap(writeCtx, t, cp, ns) })

	const informers = 30
	infCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	var viaOn, viaOff harness.Lists
	startInformers(infCtx, t, sidecars[userOn].Config, []string{ns}, false, informers, &viaOn)
	startInformers(infCtx, t, sidecars[userOff].Config, []string{ns}, false, informers, &viaOff)
	onStart, offStart := viaOn.Total(), viaOff.Total()
	t.Logf("informers synced: %d LIST and %d WatchList requests through each sidecar", viaOn.List(), viaOn.WatchList())
	before := map[string][]int{}
	for _, u := range []string{userOn, userOff} {
		before[u] = waitWatches(ctx, t, cp, u, informers)
	}
	t.Logf("watches per apiserver with apiserver %d stopped: rebalancing %v, not rebalancing %v", victim.Index+1, before[userOn], before[userOff])
	if before[userOn][victim.Index] != 0 {
		t.Fatalf("the stopped apiserver holds %d watches", before[userOn][victim.Index])
	}

	stopWrites()
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ready := victim.ReadyAt()
	t.Logf("apiserver %d ready %s after its start", victim.Index+1, ready.Sub(victim.StartedAt()).Round(time.Millisecond))
	time.Sleep(quiet)
	t.Logf("%s after apiserver %d was ready, with no writes since before its start: rebalancing %v; rebalancer: %s; resuming writes",
		time.Since(ready).Round(time.Second), victim.Index+1, openWatchesOf(t, cp, userOn), fanoutMetricLines(t, sidecars[userOn].AdminAddress, "fanout_watch_"))
	writes.Go(func() { tickConfigMap(writesCtx, t, cp, ns) })

	const window, tolerance = 3 * time.Minute, 0.10
	var converged time.Duration
	var on, off []int
	for {
		time.Sleep(5 * time.Second)
		on, off = openWatchesOf(t, cp, userOn), openWatchesOf(t, cp, userOff)
		elapsed := time.Since(ready)
		t.Logf("%s after apiserver %d was ready: rebalancing %v, not rebalancing %v; rebalancer: %s", elapsed.Round(time.Second), victim.Index+1, on, off,
			fanoutMetricLines(t, sidecars[userOn].AdminAddress, "fanout_watch_"))
		if spreadWithin(on, informers, tolerance) {
			converged = elapsed
			break
		}
		if elapsed > window {
			break
		}
	}
	// Give a late re-list a chance to show before counting.
	time.Sleep(5 * time.Second)
	onRelists, offRelists := viaOn.Total()-onStart, viaOff.Total()-offStart
	rebalanced := fanoutMetric(t, sidecars[userOn].AdminAddress, "fanout_watch_rebalanced_total")
	t.Logf("rebalancing: spread within 33%% ± %.0f points after %s; %v watches ended by fanout; %d re-lists, %d watch errors. Not rebalancing: %v at that time, %d re-lists, %d watch errors",
		100*tolerance, converged.Round(time.Second), rebalanced, onRelists, viaOn.WatchErrors(), off, offRelists, viaOff.WatchErrors())
	if converged == 0 {
		t.Errorf("through the rebalancing sidecar the watches were %v %s after apiserver %d was ready, want each apiserver within 33%% ± %.0f points of %d",
			on, window, victim.Index+1, 100*tolerance, informers)
	}
	if onRelists != 0 {
		t.Errorf("informers through the rebalancing sidecar re-listed %d times, want 0", onRelists)
	}
	if n := viaOn.WatchErrors(); n != 0 {
		t.Errorf("informers through the rebalancing sidecar saw %d watch errors, want 0", n)
	}
	if spreadWithin(off, informers, tolerance) {
		t.Errorf("without rebalancing the watches were already spread (%v) when the rebalancing sidecar's were: the test shows nothing", off)
	}
	if rebalanced == 0 {
		t.Errorf("fanout_watch_rebalanced_total is 0: the spread came from something else")
	}
}

// spreadWithin reports whether all n watches are open and each apiserver
// holds 1/len(counts) of them ± tolerance.
func spreadWithin(counts []int, n int, tolerance float64) bool {
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != n {
		return false
	}
	for _, c := range counts {
		if math.Abs(float64(c)/float64(total)-1/float64(len(counts))) > tolerance {
			return false
		}
	}
	return true
}

// openWatchesOf counts, per apiserver, the watches of user that its audit
// log shows started and not yet finished.
func openWatchesOf(t *testing.T, cp *harness.ControlPlane, user string) []int {
	t.Helper()
	return openWatchesWhere(t, cp, func(e *harness.AuditEvent) bool { return e.User.Username == user })
}

// openWatchesWhere counts, per apiserver, the watches matching match that
// its audit log shows started and not yet finished.
func openWatchesWhere(t *testing.T, cp *harness.ControlPlane, match func(*harness.AuditEvent) bool) []int {
	t.Helper()
	out := make([]int, len(cp.APIServers))
	for i, a := range cp.APIServers {
		events, err := harness.ReadAuditLog(a.AuditLog)
		if err != nil {
			t.Fatalf("reading the audit log of apiserver %d: %v", i+1, err)
		}
		out[i] = openWatchesIn(events, match)
	}
	return out
}

// openWatchesIn counts the watches matching match that events show
// started and not yet finished.
func openWatchesIn(events []harness.AuditEvent, match func(*harness.AuditEvent) bool) int {
	open := map[string]bool{}
	for i := range events {
		e := &events[i]
		if e.Verb != "watch" || !match(e) {
			continue
		}
		switch e.Stage {
		case "ResponseStarted":
			open[e.AuditID] = true
		case "ResponseComplete", "Panic":
			delete(open, e.AuditID)
		}
	}
	return len(open)
}

// waitWatches waits until the audit logs show n open watches of user.
func waitWatches(ctx context.Context, t *testing.T, cp *harness.ControlPlane, user string, n int) []int {
	t.Helper()
	var got []int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(time.Second) {
		got = openWatchesOf(t, cp, user)
		total := 0
		for _, c := range got {
			total += c
		}
		if total == n {
			return got
		}
	}
	t.Fatalf("the apiservers hold %v watches of %s, want %d in all", got, user, n)
	return nil
}

// tickConfigMap updates a ConfigMap in ns about once a second until ctx
// ends.
func tickConfigMap(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns string) {
	cms := cp.AdminClient.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rebalance-tick"}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cm, err = cms.Get(ctx, "rebalance-tick", metav1.GetOptions{})
	}
	if err != nil {
		t.Errorf("creating the ticking ConfigMap: %v", err)
		return
	}
	for i := int(time.Now().UnixNano() % 1e6); ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		cm.Data = map[string]string{"i": strconv.Itoa(i)}
		if next, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
			cm = next
		} else if ctx.Err() == nil {
			t.Logf("ticking ConfigMap update %d: %v", i, err)
			if got, err := cms.Get(ctx, cm.Name, metav1.GetOptions{}); err == nil {
				cm = got
			}
		}
	}
}

// fanoutMetric sums the samples of metric name on a sidecar's /metrics.
func fanoutMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatal(fmt.Errorf("%s: %w", line, err))
		}
		sum += v
	}
	return sum
}

// fanoutMetricLines returns the samples on a sidecar's /metrics whose
// names start with prefix, on one line.
func fanoutMetricLines(t *testing.T, admin, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "; ")
}

// tickLease renews a Lease in ns about three times a second until ctx
// ends.
func tickLease(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns string) {
	leases := cp.AdminClient.CoordinationV1().Leases(ns)
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "rebalance-noise"}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("creating the noise Lease: %v", err)
		return
	}
	for i := int32(1); ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		l.Spec.LeaseTransitions = &i
		if next, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			l = next
		} else if got, err := leases.Get(ctx, l.Name, metav1.GetOptions{}); err == nil {
			l = got
		}
	}
}
