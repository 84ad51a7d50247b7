package e2e_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// shutdownArgs make the apiservers shut down the way a careful rollout
// does: /readyz fails at once, requests are still served for the delay,
// and after it every new request gets a 429 with Retry-After rather than a
// refused connection.
var shutdownArgs = []string{"--shutdown-delay-duration=5s", "--shutdown-send-retry-after=true"}

// TestResilience runs the fault scenarios of docs/resilience.md on a
// control plane of its own (restarts would skew the shared one's spread
// tests), one after the other: a client holding watches is SIGKILLed, the
// apiservers are rolled one at a time under load, one is SIGKILLed, and
// one is overloaded.
func TestResilience(t *testing.T) {
	ctx, cp := ownControlPlane(t, 35*time.Minute, harness.Options{APIServerArgs: shutdownArgs})
	const ns, user = "e2e-resilience", "e2e-resilience-client"
	userNamespace(ctx, t, cp, ns, user)
	sidecar := userFanout(ctx, t, cp, user)

	// HAProxy as an expert would run it, for the side-by-side numbers of
	// docs/resilience.md; only logged, never asserted.
	const haproxyUser = "e2e-resilience-haproxy"
	grantConfigMaps(ctx, t, cp, ns, haproxyUser)
	hap, err := cp.StartHAProxy(ctx, t, haproxyUser)
	if errors.Is(err, exec.ErrNotFound) {
		t.Logf("no HAProxy comparison: %v", err)
		hap = nil
	} else if err != nil {
		t.Fatal(err)
	}

	t.Run("client death", func(t *testing.T) { testClientDeath(ctx, t, cp, sidecar.Kubeconfig, ns, true) })
	if hap != nil {
		t.Run("client death via haproxy", func(t *testing.T) { testClientDeath(ctx, t, cp, hap.Config.Host, ns, false) })
	}
	t.Run("rolling restart", func(t *testing.T) { testRollingRestart(ctx, t, cp, sidecar, hap, ns, user, haproxyUser) })
	t.Run("sigkill", func(t *testing.T) { testAPIServerKill(ctx, t, cp, sidecar, hap, ns) })
	t.Run("overload", func(t *testing.T) { testOverload(ctx, t, cp, sidecar, hap, ns, user, haproxyUser) })
	t.Run("network cut", func(t *testing.T) { testNetworkCut(ctx, t, cp, sidecar, hap, ns) })
	t.Run("consistency", func(t *testing.T) { testConsistency(ctx, t, cp, sidecar, ns, user) })
}

// openWatches sums apiserver_longrunning_requests of configmap watches
// over the apiservers.
func openWatches(ctx context.Context, t *testing.T, cp *harness.ControlPlane) []float64 {
	t.Helper()
	out := make([]float64, len(cp.APIServers))
	for i, a := range cp.APIServers {
		v, err := a.Metric(ctx, "apiserver_longrunning_requests", `verb="WATCH"`, `resource="configmaps"`)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// Environment of the watch-client helper process.
const (
	envWatchKubeconfig = "FANOUT_E2E_WATCH_CLIENT_KUBECONFIG"
	envWatchNamespace  = "FANOUT_E2E_WATCH_CLIENT_NAMESPACE"
	envWatchCount      = "FANOUT_E2E_WATCH_CLIENT_COUNT"
)

// TestHelperWatchClient is not a test: testClientDeath runs the test
// binary again with this test selected and the environment above, to have
// a client process it can SIGKILL. It opens the watches, says so on
// stdout, and waits to be killed.
func TestHelperWatchClient(t *testing.T) {
	kubeconfig := os.Getenv(envWatchKubeconfig)
	if kubeconfig == "" {
		t.Skip("only run by testClientDeath")
	}
	n, _ := strconv.Atoi(os.Getenv(envWatchCount))
	cfg := &rest.Config{Host: kubeconfig} // a proxy's URL: no credentials
	if !strings.HasPrefix(kubeconfig, "http://") {
		var err error
		if cfg, err = harness.RESTConfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w, err := client.CoreV1().ConfigMaps(os.Getenv(envWatchNamespace)).Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		go func() {
			for range w.ResultChan() {
			}
		}()
	}
	fmt.Printf("WATCHING %d\n", n)
	select {}
}

// testClientDeath SIGKILLs a client holding 50 watches through fanout: 3 s
// later the apiservers must hold none of them.
// kubeconfig is the client's kubeconfig, or a credential-free proxy's URL.
// With strict false the result is only logged: a comparison, not a test.
func testClientDeath(ctx context.Context, t *testing.T, cp *harness.ControlPlane, kubeconfig, ns string, strict bool) {
	const n = 50
	before := openWatches(ctx, t, cp)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperWatchClient$")
	cmd.Env = append(os.Environ(), envWatchKubeconfig+"="+kubeconfig, envWatchNamespace+"="+ns, envWatchCount+"="+strconv.Itoa(n))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "WATCHING") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		t.Fatal("the watch client did not open its watches within 2 minutes")
	}
	var during []float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		during = openWatches(ctx, t, cp)
		if sum(during)-sum(before) >= n {
			break
		}
	}
	if sum(during)-sum(before) < n {
		t.Fatalf("apiservers hold %v configmap watches, %v before the client started: want %d more", during, before, n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	time.Sleep(3*time.Second - time.Since(killed))
	after := openWatches(ctx, t, cp)
	t.Logf("configmap watches per apiserver: %v before the client, %v while it ran, %v 3 s after its SIGKILL", before, during, after)
	if strict && sum(after) > sum(before) {
		t.Errorf("3 s after the client died the apiservers still hold %v watches, %v before it started: %v abandoned",
			after, before, sum(after)-sum(before))
	}
}

// startInformers runs n informers through cfg with real reflectors,
// counting their lists in r, until ctx ends: informer i watches namespace
// i modulo len(namespaces), ConfigMaps, or with secrets Secrets for odd i.
// It returns once all have synced.
func startInformers(ctx context.Context, t *testing.T, cfg *rest.Config, namespaces []string, secrets bool, n int, r *harness.Lists) {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var synced []cache.InformerSynced
	for i := range n {
		ns := namespaces[i%len(namespaces)]
		var inf cache.SharedIndexInformer
		if secrets && i%2 == 1 {
			s := client.CoreV1().Secrets(ns)
			inf, err = harness.CountedInformer(r, &corev1.Secret{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return s.List(ctx, o) }, s.Watch)
		} else {
			cms := client.CoreV1().ConfigMaps(ns)
			inf, err = harness.CountedInformer(r, &corev1.ConfigMap{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, o) }, cms.Watch)
		}
		if err != nil {
			t.Fatal(err)
		}
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		t.Fatal("informers did not sync within 2 minutes")
	}
}

// ratedLoad cycles ConfigMaps from workers goroutines through a client limited to
// qps requests a second, recording every failed cycle and when it failed.
type ratedLoad struct {
	sent   atomic.Int64
	mu     sync.Mutex
	failed []time.Time
	errs   []error
	// failedErr is the error of each failed cycle, in the order of failed.
	failedErr []error
	stop      context.CancelFunc
	workers   sync.WaitGroup
}

func startRatedLoad(ctx context.Context, t *testing.T, cfg *rest.Config, ns, prefix string, workers int, qps float32) *ratedLoad {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = qps, int(qps/10)+1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(ns)
	l := &ratedLoad{}
	ctx, l.stop = context.WithCancel(ctx)
	t.Cleanup(l.Stop)
	for wk := range workers {
		l.workers.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				var n int64
				err := cycle(ctx, cms, fmt.Sprintf("%s%d-%d", prefix, wk, i), &n)
				l.sent.Add(n)
				if err != nil && ctx.Err() == nil {
					l.mu.Lock()
					l.failed = append(l.failed, time.Now())
					l.failedErr = append(l.failedErr, err)
					if len(l.errs) < 5 {
						l.errs = append(l.errs, fmt.Errorf("worker %d cycle %d: %w", wk, i, err))
					}
					l.mu.Unlock()
					// A failed create leaves the name behind; move on.
				}
			}
		})
	}
	return l
}

func (l *ratedLoad) Stop() {
	l.stop()
	l.workers.Wait()
}

func (l *ratedLoad) failures() ([]time.Time, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.failed...), append([]error(nil), l.errs...)
}

// testRollingRestart restarts every apiserver in turn, gracefully, under
// 200 requests/s and 50 informers through fanout, with 50 informers
// connected directly to the first apiserver for comparison.
//
// The same roll also carries the same workload through HAProxy, as user
// haproxyUser; its numbers are logged for comparison, not asserted.
func testRollingRestart(ctx context.Context, t *testing.T, cp *harness.ControlPlane, sidecar *harness.Fanout, hap *harness.HAProxy, ns, user, haproxyUser string) {
	const direct = "e2e-resilience-direct"
	directKubeconfig, err := cp.UserKubeconfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	grantConfigMaps(ctx, t, cp, ns, direct)
	directCfg, err := harness.RESTConfig(directKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	directCfg.Host = cp.APIServers[0].URL

	infCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	var viaFanout, viaDirect, viaHAProxy harness.Lists
	startInformers(infCtx, t, sidecar.Config, []string{ns}, false, 50, &viaFanout)
	startInformers(infCtx, t, directCfg, []string{ns}, false, 50, &viaDirect)
	var hapLoad *ratedLoad
	if hap != nil {
		startInformers(infCtx, t, hap.Config, []string{ns}, false, 50, &viaHAProxy)
		hapLoad = startRatedLoad(ctx, t, hap.Config, ns, "hroll", 32, 200)
	}
	fanoutStart, directStart, hapStart := viaFanout.Total(), viaDirect.Total(), viaHAProxy.Total()

	load := startRatedLoad(ctx, t, sidecar.Config, ns, "roll", 32, 200)
	time.Sleep(5 * time.Second)
	rollStart := time.Now()
	for _, victim := range cp.APIServers {
		from := time.Now()
		if err := victim.Stop(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		time.Sleep(2 * time.Second)
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// Let fanout see it ready (probe rise) and ramp it up.
		time.Sleep(15 * time.Second)
		to := time.Now()
		counts, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
			return e.User.Username == user && e.StageTimestamp.After(from) && e.StageTimestamp.Before(to)
		})
		if err != nil {
			t.Fatal(err)
		}
		shares := harness.Shares(counts)
		hapCounts, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
			return e.User.Username == haproxyUser && e.StageTimestamp.After(from) && e.StageTimestamp.Before(to)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("restart of apiserver %d: stopped in %s, ready %s after its start; served in the window through fanout: %s; through HAProxy: %s",
			victim.Index+1, stopped.Sub(from).Round(time.Millisecond), victim.ReadyAt().Sub(victim.StartedAt()).Round(time.Millisecond),
			harness.FormatShares(counts), harness.FormatShares(hapCounts))
		for i, s := range shares {
			if i != victim.Index && s > 0.60 {
				t.Errorf("during the restart of apiserver %d, apiserver %d took %.1f%% of the requests, want at most 60%%", victim.Index+1, i+1, 100*s)
			}
		}
	}
	// Within 3 minutes after the rollout the 50 informers' watches are
	// spread 33% ± 10% again (placement and active rebalancing), while the
	// load goes on writing.
	rolled := time.Now()
	var spread []int
	for {
		spread = openWatchesOf(t, cp, user)
		if spreadWithin(spread, 50, 0.10) || time.Since(rolled) > 3*time.Minute {
			break
		}
		time.Sleep(5 * time.Second)
	}
	spreadAfter := time.Since(rolled)
	hapSpread := openWatchesOf(t, cp, haproxyUser)
	t.Logf("watches of the 50 informers per apiserver %s after the roll: through fanout %v, through HAProxy %v", spreadAfter.Round(time.Second), spread, hapSpread)
	if !spreadWithin(spread, 50, 0.10) {
		t.Errorf("3 minutes after the roll the informers' watches through fanout are %v per apiserver, want 33%% ± 10%% each", spread)
	}
	load.Stop()
	if hapLoad != nil {
		hapLoad.Stop()
		hapFailed, hapErrs := hapLoad.failures()
		t.Logf("through HAProxy in the same roll: %d requests sent, %d cycles failed (first: %v); %d re-lists of 50 informers",
			hapLoad.sent.Load(), len(hapFailed), hapErrs, viaHAProxy.Total()-hapStart)
	}
	failed, errs := load.failures()
	took := time.Since(rollStart)
	t.Logf("rolling restart took %s: %d requests sent (%.0f/s), %d cycles failed", took.Round(time.Second), load.sent.Load(), float64(load.sent.Load())/took.Seconds(), len(failed))
	for _, err := range errs {
		t.Errorf("client saw an error: %v", err)
	}
	fanoutRelists, directRelists := viaFanout.Total()-fanoutStart, viaDirect.Total()-directStart
	t.Logf("re-lists during the roll: %d of 50 informers through fanout (%d LIST, %d WatchList in all), %d of 50 connected directly to apiserver 1",
		fanoutRelists, viaFanout.List(), viaFanout.WatchList(), directRelists)
	if fanoutRelists > directRelists {
		t.Errorf("informers through fanout re-listed %d times, more than the %d of a direct connection in the same roll", fanoutRelists, directRelists)
	}
}

// testAPIServerKill SIGKILLs one apiserver under load: only requests in
// flight on it may fail, so every failure must come right at the kill.
func testAPIServerKill(ctx context.Context, t *testing.T, cp *harness.ControlPlane, sidecar *harness.Fanout, hap *harness.HAProxy, ns string) {
	victim := cp.APIServers[1]
	load := startRatedLoad(ctx, t, sidecar.Config, ns, "kill", 8, 200)
	var hapLoad *ratedLoad
	if hap != nil {
		hapLoad = startRatedLoad(ctx, t, hap.Config, ns, "hkill", 8, 200)
	}
	time.Sleep(5 * time.Second)
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(15 * time.Second)
	load.Stop()
	if hapLoad != nil {
		hapLoad.Stop()
		hapFailed, hapErrs := hapLoad.failures()
		t.Logf("through HAProxy in the same kill: %d requests sent, %d cycles failed, %d of them more than 2 s after the kill (first: %v)",
			hapLoad.sent.Load(), len(hapFailed), countAfter(hapFailed, killed.Add(2*time.Second)), hapErrs)
	}
	failed, errs := load.failures()
	t.Logf("SIGKILL of apiserver %d: %d requests sent, %d cycles failed: %v", victim.Index+1, load.sent.Load(), len(failed), errs)
	// At most one request per worker was in flight; an error reports up to
	// the transport's read of a dead connection later, bounded here by 2 s.
	if len(failed) > 8 {
		t.Errorf("%d cycles failed, want at most 8 (one request in flight per worker): %v", len(failed), errs)
	}
	for i, at := range failed {
		if at.Sub(killed) > 2*time.Second {
			t.Errorf("a cycle failed %s after the kill, when only requests in flight at the kill may fail: %v", at.Sub(killed).Round(time.Millisecond), errs[min(i, len(errs)-1)])
		}
	}
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// testOverload lowers one apiserver's in-flight limits: it must serve a
// smaller share than the others, and its 429s are counted at the
// apiserver (the client retries them, and fanout moves them).
func testOverload(ctx context.Context, t *testing.T, cp *harness.ControlPlane, sidecar *harness.Fanout, hap *harness.HAProxy, ns, user, haproxyUser string) {
	victim := cp.APIServers[2]
	rejectingLevel(ctx, t, cp, user, haproxyUser)
	if err := victim.RestartWith(ctx, "--max-requests-inflight=4", "--max-mutating-requests-inflight=2"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := victim.RestartWith(ctx); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(15 * time.Second) // probe rise and slow start
	o := overloadPhase(ctx, t, cp, victim, sidecar.Config, ns, user, "ovl")
	t.Logf("overload of apiserver %d: %d requests sent, %d cycles failed, %v APF rejections at it; served (429s excluded): %s",
		victim.Index+1, o.sent, o.failed, o.rejected, harness.FormatShares(o.counts))
	if o.rejected == 0 {
		t.Errorf("apiserver %d rejected nothing: the load did not overload it, so the test proves nothing", victim.Index+1)
	}
	for i, c := range o.counts {
		if i != victim.Index && o.counts[victim.Index] >= c {
			t.Errorf("overloaded apiserver %d served %d, not less than apiserver %d's %d", victim.Index+1, o.counts[victim.Index], i+1, c)
		}
	}
	if hap != nil {
		// The same load through HAProxy, after fanout's: logged only.
		h := overloadPhase(ctx, t, cp, victim, hap.Config, ns, haproxyUser, "hovl")
		t.Logf("through HAProxy, the same overload: %d requests sent, %d cycles failed, %v APF rejections at it; served (429s excluded): %s",
			h.sent, h.failed, h.rejected, harness.FormatShares(h.counts))
	}
}

type overloadResult struct {
	sent     int64
	failed   int
	rejected float64 // APF rejections at the victim during the phase
	counts   []int   // requests of user served per apiserver, 429s excluded
}

// overloadPhase runs three rated loads of 1,000 qps as user through cfg
// for 30 s.
func overloadPhase(ctx context.Context, t *testing.T, cp *harness.ControlPlane, victim *harness.APIServer, cfg *rest.Config, ns, user, prefix string) overloadResult {
	t.Helper()
	rejectedBefore, err := victim.Metric(ctx, "apiserver_flowcontrol_rejected_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	var loads []*ratedLoad
	for i := range 3 {
		loads = append(loads, startRatedLoad(ctx, t, cfg, ns, fmt.Sprintf("%s%d-", prefix, i), 8, 1000))
	}
	time.Sleep(30 * time.Second)
	var r overloadResult
	for _, l := range loads {
		l.Stop()
		f, _ := l.failures()
		r.sent += l.sent.Load()
		r.failed += len(f)
	}
	to := time.Now()
	rejected, err := victim.Metric(ctx, "apiserver_flowcontrol_rejected_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	r.rejected = rejected - rejectedBefore
	r.counts, err = cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
		return e.User.Username == user && e.StageTimestamp.After(from) && e.StageTimestamp.Before(to) &&
			(e.ResponseStatus == nil || e.ResponseStatus.Code != 429)
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// countAfter counts the times after t.
func countAfter(times []time.Time, t time.Time) int {
	n := 0
	for _, at := range times {
		if at.After(t) {
			n++
		}
	}
	return n
}

// rejectingLevel puts the users' resource requests in a priority level of
// their own that rejects at once rather than queue. APF objects are
// cluster-wide, but each apiserver derives the level's seats from its own
// in-flight limits: the normal apiservers give it dozens, the one with
// lowered limits one or two, so only that one rejects. With the default
// levels, which queue for up to 15 s, it would be slow rather than reject.
func rejectingLevel(ctx context.Context, t *testing.T, cp *harness.ControlPlane, users ...string) {
	t.Helper()
	fc := cp.AdminClient.FlowcontrolV1()
	pl := &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-reject"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To(int32(30)),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, pl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var subjects []flowcontrolv1.Subject
	for _, u := range users {
		subjects = append(subjects, flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: u}})
	}
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-reject"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: pl.Name},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: subjects,
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"},
				}},
			}},
		},
	}
	if _, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = fc.FlowSchemas().Delete(ctx, fs.Name, metav1.DeleteOptions{})
		_ = fc.PriorityLevelConfigurations().Delete(ctx, pl.Name, metav1.DeleteOptions{})
	})
}

// slowest records the longest short request (time to response headers)
// of a client.
type slowest struct {
	mu  sync.Mutex
	max time.Duration
	at  time.Time
	url string
}

func (s *slowest) wrap(rt http.RoundTripper) http.RoundTripper {
	return testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(r)
		if d := time.Since(start); r.URL.Query().Get("watch") == "" {
			s.mu.Lock()
			if d > s.max {
				s.max, s.at, s.url = d, start, r.Method+" "+r.URL.Path
			}
			s.mu.Unlock()
		}
		return resp, err
	})
}

// silence tracks, per informer, the longest gap between two events.
type silence struct {
	mu   sync.Mutex
	last []time.Time
	max  []time.Duration
}

func (s *silence) event(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.last[i].IsZero() {
		s.max[i] = max(s.max[i], now.Sub(s.last[i]))
	}
	s.last[i] = now
}

// testNetworkCut cuts one apiserver's host off the network (packets
// dropped, no RST) for 30 s under load and 15 informers: no short request
// may take longer than 10 s, no informer may go 15 s without an event
// while the workload writes several a second, and a kube-controller-manager
// with leader election behind its own sidecar keeps its lease (it must
// renew within 10 s).
func testNetworkCut(ctx context.Context, t *testing.T, cp *harness.ControlPlane, sidecar *harness.Fanout, hap *harness.HAProxy, ns string) {
	// Not the first: the admin client talks to the first directly.
	victim := cp.APIServers[len(cp.APIServers)-1]
	kcmKubeconfig, err := cp.ControllerManagerKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kcmSidecar, err := cp.StartFanout(ctx, t, "kcm-network-cut", kcmKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := cp.StartControllerManager(t, kcmSidecar.Kubeconfig, "--leader-elect=true")
	if err != nil {
		t.Fatal(err)
	}
	leaseBefore := waitLease(ctx, t, cp)
	var slow slowest
	cfg := rest.CopyConfig(sidecar.Config)
	cfg.WrapTransport = slow.wrap
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const informers = 15
	gaps := &silence{last: make([]time.Time, informers), max: make([]time.Duration, informers)}
	infCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	var synced []cache.InformerSynced
	for i := range informers {
		lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { gaps.event(i) },
			UpdateFunc: func(any, any) { gaps.event(i) },
			DeleteFunc: func(any) { gaps.event(i) },
		}); err != nil {
			t.Fatal(err)
		}
		go inf.RunWithContext(infCtx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers did not sync")
	}
	load := startRatedLoad(ctx, t, cfg, ns, "cut", 8, 100)
	// The same load through HAProxy, logged only.
	var hapSlow slowest
	var hapLoad *ratedLoad
	if hap != nil {
		hcfg := rest.CopyConfig(hap.Config)
		hcfg.WrapTransport = hapSlow.wrap
		hapLoad = startRatedLoad(ctx, t, hcfg, ns, "hcut", 8, 100)
	}
	time.Sleep(5 * time.Second)
	// Forget the gaps before the cut: the informers' start is not the test.
	gaps.mu.Lock()
	clear(gaps.max)
	gaps.mu.Unlock()
	for _, s := range []*slowest{&slow, &hapSlow} {
		s.mu.Lock()
		s.max = 0
		s.mu.Unlock()
	}

	cut := time.Now()
	if err := victim.Disconnect(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Second)
	if err := victim.Reconnect(); err != nil {
		t.Fatal(err)
	}
	reconnected := time.Now()
	time.Sleep(10 * time.Second)
	load.Stop()
	stopInformers()
	if hapLoad != nil {
		hapLoad.Stop()
		hapFailed, hapErrs := hapLoad.failures()
		hapSlow.mu.Lock()
		t.Logf("through HAProxy in the same cut: %d requests sent, %d cycles failed, %d of them more than 12 s after the cut (first: %v); longest short request %s (%s after the cut)",
			hapLoad.sent.Load(), len(hapFailed), countAfter(hapFailed, cut.Add(12*time.Second)), hapErrs, hapSlow.max.Round(time.Millisecond), hapSlow.at.Sub(cut).Round(time.Millisecond))
		hapSlow.mu.Unlock()
	}
	failed, errs := load.failures()
	slow.mu.Lock()
	longest, longestAt, longestURL := slow.max, slow.at, slow.url
	slow.mu.Unlock()
	gaps.mu.Lock()
	maxGap := slices.Max(gaps.max)
	gapsCopy := slices.Clone(gaps.max)
	gaps.mu.Unlock()
	t.Logf("network cut of apiserver %d for 30 s: %d requests sent, %d cycles failed %v; longest short request %s (%s, %s after the cut); longest silence of an informer %s (all: %v)",
		victim.Index+1, load.sent.Load(), len(failed), errs, longest.Round(time.Millisecond), longestURL, longestAt.Sub(cut).Round(time.Millisecond), maxGap.Round(time.Millisecond), gapsCopy)
	if longest > 10*time.Second {
		t.Errorf("a short request took %s, want at most 10 s however a host dies", longest.Round(time.Millisecond))
	}
	if maxGap > 15*time.Second {
		t.Errorf("an informer went %s without an event while the workload wrote several a second, want at most 15 s", maxGap.Round(time.Millisecond))
	}
	load.mu.Lock()
	failedErr := slices.Clone(load.failedErr)
	load.mu.Unlock()
	for i, at := range failed {
		if at.Sub(cut) <= 12*time.Second {
			continue
		}
		// The cut also severed the host's own apiserver from etcd. Once the
		// host is back, that apiserver may answer a request it received
		// with an etcd error of its own until its etcd client recovers: a
		// failure of the apiserver, not of the path fanout chose.
		if at.After(reconnected) && apiserverStorageError(failedErr[i]) {
			t.Logf("tolerated: a cycle failed %s after the cut, %s after the host came back, with the apiserver's own etcd error: %v",
				at.Sub(cut).Round(time.Millisecond), at.Sub(reconnected).Round(time.Millisecond), failedErr[i])
			continue
		}
		t.Errorf("a cycle failed %s after the cut: only requests in flight on the cut host may fail: %v", at.Sub(cut).Round(time.Millisecond), failedErr[i])
	}
	leaseAfter := waitLease(ctx, t, cp)
	t.Logf("kube-controller-manager lease: holder %s, %d transitions before the cut; %s, %d after",
		*leaseBefore.Spec.HolderIdentity, ptr.Deref(leaseBefore.Spec.LeaseTransitions, 0), *leaseAfter.Spec.HolderIdentity, ptr.Deref(leaseAfter.Spec.LeaseTransitions, 0))
	if !kcm.Running() {
		t.Errorf("kube-controller-manager exited during the cut (it does when it loses its lease): %v; last lines of %s:\n%s", kcm.Err(), kcm.LogPath, harness.Tail(kcm.LogPath, 20))
	}
	if *leaseAfter.Spec.HolderIdentity != *leaseBefore.Spec.HolderIdentity || ptr.Deref(leaseAfter.Spec.LeaseTransitions, 0) != ptr.Deref(leaseBefore.Spec.LeaseTransitions, 0) {
		t.Errorf("kube-controller-manager lost its lease during the cut")
	}
	if err := victim.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitLease waits for kube-controller-manager's leader lease to have a
// holder and returns it.
func waitLease(ctx context.Context, t *testing.T, cp *harness.ControlPlane) *coordinationv1.Lease {
	t.Helper()
	var last error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		l, err := cp.AdminClient.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			return l
		}
		last = err
	}
	t.Fatalf("kube-controller-manager holds no lease after 2 minutes: %v", last)
	return nil
}

// testConsistency writes through fanout and reads back at once through
// fanout, where the read usually lands on another apiserver: a GET or LIST
// with resourceVersion="" is served from etcd with a quorum read and must
// see the write. (resourceVersion="0" is served from the apiserver's watch
// cache, which may lag; see docs/resilience.md.)
func testConsistency(ctx context.Context, t *testing.T, cp *harness.ControlPlane, sidecar *harness.Fanout, ns, user string) {
	cfg := rest.CopyConfig(sidecar.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(ns)
	from := time.Now()
	const n = 100
	for i := range n {
		name := fmt.Sprintf("consistency-%d", i)
		created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("GET right after the create of %s: %v", name, err)
			continue
		}
		if got.ResourceVersion != created.ResourceVersion {
			t.Errorf("GET of %s right after its create: resourceVersion %s, want %s", name, got.ResourceVersion, created.ResourceVersion)
		}
		list, err := cms.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil || len(list.Items) != 1 {
			t.Errorf("LIST right after the create of %s: %d items, %v; want it", name, len(list.Items), err)
		}
	}
	counts, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
		return e.User.Username == user && e.StageTimestamp.After(from) && strings.Contains(e.RequestURI, "consistency-")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d create-then-read rounds through fanout, served %s", n, harness.FormatShares(counts))
	used := 0
	for _, c := range counts {
		if c > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("all reads and writes went to one apiserver (%v): the test checked nothing across instances", counts)
	}
}

// apiserverStorageError reports whether err is kube-apiserver's own answer
// (a Status, not fanout's) relaying a failed etcd call, which it words as
// a gRPC error.
func apiserverStorageError(err error) bool {
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		return false
	}
	msg := se.ErrStatus.Message
	return !strings.HasPrefix(msg, "fanout") && strings.Contains(msg, "rpc error: code = ")
}

func TestAPIServerStorageError(t *testing.T) {
	status := func(msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: msg}}
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{status("rpc error: code = Unavailable desc = keepalive ping failed to receive ACK within timeout"), true},
		{fmt.Errorf("create: %w", status("rpc error: code = DeadlineExceeded desc = context deadline exceeded")), true},
		{status("fanout: request to kube-apiserver 10.0.0.3:6443 failed: rpc error: code = Unavailable"), false},
		{status("fanout: request to kube-apiserver 10.0.0.3:6443 failed: http2: client connection lost"), false},
		{errors.New("rpc error: code = Unavailable desc = x"), false},
	} {
		if got := apiserverStorageError(tt.err); got != tt.want {
			t.Errorf("apiserverStorageError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
