package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// soak is the state of one TestSoak run that the faults work on.
type soak struct {
	t    *testing.T
	e    *nodeEnv
	cp   *harness.ControlPlane
	user string
	ns   string
	dir  string
	// hog is the APF overload's user, for one apiserver.
	hog     *rest.Config
	rng     *rand.Rand
	sidecar *harness.Fanout
	vol     *harness.SecretVolume

	sidecarKills, rotations int
}

// Soak settings, from the environment (Makefile target soak).
const (
	soakDefaultDuration = 3 * time.Minute
	// Every seed gives each kind once in every six faults. Seed 1 opens
	// with kill-sidecar, apf-overload, kill-apiserver: the three faults of
	// a 3-minute run; seed 10 with the other three (cut-host, rotate,
	// roll).
	soakDefaultSeed = 1
	soakFaultEvery  = time.Minute
	soakFirstFault  = 30 * time.Second
	// soakGrace extends each fault window: a failure that begins up to
	// soakGrace after a fault ended is still the fault's (an ejection or
	// a not-ready endpoint in fanout, a retry in client-go outlive the
	// fault by a few seconds). The longest lag measured, reported per
	// fault as MaxLagS, was 2.5 s (a write after a host cut, 30-minute
	// run); 15 s is six times that.
	soakGrace = 15 * time.Second

	soakWriters      = 3
	soakWriteEvery   = 500 * time.Millisecond
	soakReaders      = 2
	soakReadEvery    = 100 * time.Millisecond
	soakInformers    = 50
	soakScaleEvery   = 20 * time.Second
	soakScaleLo      = 2
	soakScaleHi      = 10
	soakSampleEvery  = 5 * time.Second
	soakSpreadWindow = 3 * time.Minute
	soakSpreadTol    = 0.10
)

// Limits on the host fanout's trend, the slope of a least-squares line
// through the samples of its last two thirds (at least the first minute
// left out: the informers' caches, connection pools and the heap's goal
// are still settling then): RSS in MiB per hour, goroutines per hour. The
// limit is the larger of a rate and a rise over the fitted span. A
// 3-minute run fits about 2 minutes, over which the heap's stepwise
// growth alone moves RSS by about a MiB (runs r1, r2: +0.9, +1.2 MiB); a
// rate alone would call that a trend of tens of MiB/h. Over 30 minutes
// the rate decides. The runs: docs/resilience.md (Soak).
const (
	soakRSSRate       = 10.0 // MiB/h
	soakRSSRise       = 4.0  // MiB over the span
	soakGoroutineRate = 40.0 // per hour
	soakGoroutineRise = 15.0 // over the span
)

func soakLimit(rate, rise, spanH float64) float64 {
	if spanH <= 0 {
		return rate
	}
	return max(rate, rise/spanH)
}

// soakReport is the JSON report (soak.json) and what the summary and the
// plot draw from.
type soakReport struct {
	Seed      uint64  `json:"seed"`
	DurationS float64 `json:"duration_s"`
	WallS     float64 `json:"wall_s"`
	// EnvS is what of WallS went to setting up the real node's
	// environment (nothing when an earlier test did): WallS − EnvS is
	// what the soak adds to a suite.
	EnvS        float64           `json:"env_s"`
	GraceS      float64           `json:"grace_s"`
	APIServers  []string          `json:"apiservers"`
	Faults      []soakFaultReport `json:"faults"`
	Writes      soakWriteCheck    `json:"writes"`
	WriteErrors int               `json:"write_errors"`
	// WriteFailures are the writes that returned an error, each with it.
	WriteFailures  []soakOp            `json:"write_failures"`
	Reads          int                 `json:"reads"`
	ReadFailures   []soakFailure       `json:"read_failures"`
	ReadsOutside   int                 `json:"read_failures_outside_windows"`
	RelistsFanout  int64               `json:"relists_fanout"`
	RelistsL4      int64               `json:"relists_l4"`
	WatchErrors    [2]int64            `json:"watch_errors_fanout_l4"`
	Watches        []int               `json:"open_watches_end"`
	L4Watches      []int               `json:"l4_open_watches_end"`
	SpreadAfterS   float64             `json:"spread_within_after_s"`
	SpreadOK       bool                `json:"spread_ok"`
	RSSSlope       float64             `json:"rss_slope_mib_per_h"`
	GoroutineSlope float64             `json:"goroutine_slope_per_h"`
	FitSpanS       float64             `json:"fit_span_s"`
	RSSLimit       float64             `json:"rss_slope_limit"`
	GoroutineLim   float64             `json:"goroutine_slope_limit"`
	Windows        []soakShareWindow   `json:"share_windows"`
	Samples        []soakSample        `json:"samples"`
	Deployment     string              `json:"deployment"`
	Checks         map[string]string   `json:"checks"`
	Extra          map[string][]string `json:"extra,omitempty"`

	start time.Time
}

type soakFaultReport struct {
	soakFault
	StartS       float64 `json:"start_s"`
	EndS         float64 `json:"end_s"`
	ReadFailures int     `json:"read_failures"`
	WriteErrors  int     `json:"write_errors"`
	// MaxLagS is how long after the fault's end its last failure began
	// (negative: all began during it); nil without failures.
	MaxLagS *float64 `json:"max_lag_s,omitempty"`
}

type soakShareWindow struct {
	FromS float64  `json:"from_s"`
	ToS   float64  `json:"to_s"`
	Per   [][]int  `json:"served"` // per client group, per apiserver
	Names []string `json:"groups"`
}

func soakSettings(t *testing.T) (time.Duration, uint64, string) {
	t.Helper()
	d := soakDefaultDuration
	if v := os.Getenv("FANOUT_SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < time.Minute {
			t.Fatalf("FANOUT_SOAK_DURATION=%q: want a duration of at least 1m (%v)", v, err)
		}
	}
	seed := uint64(soakDefaultSeed)
	if v := os.Getenv("FANOUT_SOAK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FANOUT_SOAK_SEED=%q: want an unsigned integer (%v)", v, err)
		}
	}
	out := os.Getenv("FANOUT_SOAK_OUT")
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "fanout-soak-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return d, seed, out
}

// TestSoak is the chaos soak of issue 33 on the real node: the in-pod
// kube-controller-manager and kube-scheduler reconcile a Deployment that
// scales between 2 and 10 replicas every 20 s; through a fanout on the
// host, writers create, update and delete ConfigMaps that carry unique IDs,
// readers GET and LIST, and 50 informers watch; the same 50 informers run
// through a plain L4 balancer. Every minute a fault, drawn by the seed:
// a rolling restart, an apiserver SIGKILLed, a host cut off, APF rejecting
// the soak user, an in-pod fanout SIGKILLed, a certificate rotated. After
// each fault and at the end every write is read back; see docs/resilience.md
// (Soak) for the checks and their limits.
func TestSoak(t *testing.T) {
	if testing.Short() { // before soakSettings makes its output folder
		t.Skip("needs the real node")
	}
	duration, seed, out := soakSettings(t)
	t.Logf("soak: %s, seed %d (FANOUT_SOAK_SEED), output in %s", duration, seed, out)
	wallStart := time.Now()
	ctx, e := realNode(t, duration+30*time.Minute)
	envS := time.Since(wallStart).Seconds()
	cp := e.cp

	const ns, user, l4User = "e2e-soak", "e2e-soak", "e2e-soak-l4"
	e.namespace(t, ctx, ns)
	s := &soak{t: t, e: e, cp: cp, user: user, ns: ns, dir: t.TempDir(), rng: rand.New(rand.NewPCG(seed, 0x50a4))}
	// Registered after the namespace's cleanup, so it runs first: the
	// namespace is deleted through apiserver 1.
	t.Cleanup(s.restoreEnv)
	soakRBAC(ctx, t, cp, ns, user, l4User, soakHogUser)
	hogKubeconfig, err := cp.UserKubeconfig(soakHogUser)
	if err != nil {
		t.Fatal(err)
	}
	if s.hog, err = harness.RESTConfig(hogKubeconfig); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.AdminClient.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: soakHogObject}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The host fanout reads its client certificate from a secret volume,
	// so that a rotation can swap it.
	ck, err := harness.IssueClient(cp.PKI.CA, filepath.Join(s.dir, "minted"), "client-0", user)
	if err != nil {
		t.Fatal(err)
	}
	if s.vol, err = harness.NewSecretVolume(filepath.Join(s.dir, "client"), map[string][]byte{"tls.crt": ck.CertPEM, "tls.key": ck.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(s.dir, "ca.crt")
	if err := os.WriteFile(caFile, cp.PKI.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s.sidecar = fileFanout(ctx, t, cp, "soak", s.dir, caFile, s.vol.Path("tls.crt"), s.vol.Path("tls.key"), "")
	fanoutClient := soakClient(t, s.sidecar.Config, time.Minute)
	fanoutInformerClient := soakClient(t, s.sidecar.Config, 0)

	proxy := startL4ProxyFor(t, cp)
	l4Kubeconfig, err := cp.UserKubeconfig(l4User)
	if err != nil {
		t.Fatal(err)
	}
	l4Cfg, err := harness.RESTConfig(l4Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proxy.Addr())
	l4Cfg.Host = "https://127.0.0.1:" + port
	l4Client := soakClient(t, l4Cfg, 0)

	if err := soakLogConfigMaps(ctx, fanoutClient, ns, soakWriters); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.AdminClient.AppsV1().Deployments(ns).Create(ctx, deployment("soak", soakScaleLo, harness.PauseImage, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.waitPodsReady(ctx, ns, "app=soak", soakScaleLo, 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	infCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	var fanoutLists, l4Lists harness.Lists
	if err := startSoakInformers(infCtx, fanoutInformerClient, ns, soakInformers, &fanoutLists); err != nil {
		t.Fatal(err)
	}
	if err := startSoakInformers(infCtx, l4Client, ns, soakInformers, &l4Lists); err != nil {
		t.Fatal(err)
	}
	fanoutBase, l4Base := fanoutLists.Total(), l4Lists.Total()

	audit := newSoakAudit(cp, e.node, user, l4User)
	r := &soakReport{Seed: seed, EnvS: envS, GraceS: soakGrace.Seconds(), Checks: map[string]string{}, Extra: map[string][]string{}}
	for _, a := range cp.APIServers {
		r.APIServers = append(r.APIServers, a.URL)
	}
	r.start = time.Now()
	audit.since = r.start
	t.Logf("soak load starts: %d writers every %s, %d readers every %s, %d informers through fanout and %d through the L4 balancer (L4 connections per apiserver %v), Deployment soak scaling %d↔%d every %s",
		soakWriters, soakWriteEvery, soakReaders, soakReadEvery, soakInformers, soakInformers, proxy.Connections(), soakScaleLo, soakScaleHi, soakScaleEvery)

	var ledger soakLedger
	var reads soakReads
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadWG sync.WaitGroup
	for w := range soakWriters {
		loadWG.Go(func() { soakWriter(loadCtx, fanoutClient, ns, w, soakWriteEvery, &ledger) })
	}
	for i := range soakReaders {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		loadWG.Go(func() { soakReader(loadCtx, fanoutClient, ns, soakWriters, soakReadEvery, rng, &reads) })
	}
	loadWG.Go(func() {
		soakScaler(loadCtx, t.Logf, fanoutClient, ns, "soak", soakScaleLo, soakScaleHi, soakScaleEvery)
	})
	defer func() { stopLoad(); loadWG.Wait() }()

	var samplesMu, auditMu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			sm := soakSample{At: time.Since(r.start).Seconds()}
			sm.RSSMiB, _ = rssMiB(s.sidecar.PID())
			sm.Goroutines, _ = s.sidecar.Metric("go_goroutines", nil)
			heap, _ := s.sidecar.Metric("go_memstats_heap_inuse_bytes", nil)
			sm.HeapMiB = heap / (1 << 20)
			total, fails := reads.snapshot()
			sm.Reads, sm.ReadFailures = total, len(fails)
			for _, op := range ledger.snapshot() {
				sm.Writes++
				if op.Err != "" {
					sm.WriteFailures++
				}
			}
			auditMu.Lock()
			if err := audit.poll(); err != nil {
				t.Logf("audit: %v", err)
			}
			sm.Watches, sm.L4Watches = audit.openWatches(auditSoak), audit.openWatches(auditL4)
			auditMu.Unlock()
			samplesMu.Lock()
			r.Samples = append(r.Samples, sm)
			samplesMu.Unlock()
			select {
			case <-sampleCtx.Done():
				return
			case <-time.After(soakSampleEvery):
			}
		}
	}()
	stopSampler := sync.OnceFunc(func() { stopSampling(); <-samplerDone })
	defer stopSampler()

	// Faults, one a minute, each followed by a check of every write.
	bag := &soakFaultBag{rng: s.rng}
	end := r.start.Add(duration)
	for next := r.start.Add(soakFirstFault); next.Before(end); {
		pause(ctx, time.Until(next))
		kind := bag.next()
		t.Logf("fault %d at %s: %s", len(r.Faults)+1, time.Since(r.start).Round(time.Second), kind)
		f := s.inject(ctx, kind)
		r.Faults = append(r.Faults, soakFaultReport{soakFault: f})
		t.Logf("fault %d (%s, %s) over after %s", len(r.Faults), kind, f.Target, f.End.Sub(f.Start).Round(100*time.Millisecond))
		if f.Err != "" {
			t.Errorf("fault %d (%s, %s): %s", len(r.Faults), kind, f.Target, f.Err)
			s.restoreEnv()
		}
		pause(ctx, soakGrace)
		c := soakCheckWrites(ctx, t, cp, ns, &ledger)
		t.Logf("after fault %d: %d writes, %d confirmed, %d indeterminate; %d lost, %d duplicated, %d unknown",
			len(r.Faults), c.Writes, c.Confirmed, c.Indeterminate, len(c.Lost), len(c.Duplicated), len(c.Unknown))
		if !c.ok() {
			t.Errorf("after fault %d (%s): lost %v, duplicated %v, unknown IDs %v", len(r.Faults), kind, c.Lost, c.Duplicated, c.Unknown)
		}
		next = next.Add(soakFaultEvery)
		if now := time.Now(); next.Before(now) {
			next = now
		}
	}
	pause(ctx, time.Until(end))

	// The spread, with the load still on: the informers' watches need
	// events to move (docs/resilience.md, rule 3).
	spreadStart := time.Now()
	for {
		auditMu.Lock()
		err := audit.poll()
		r.Watches, r.L4Watches = audit.openWatches(auditSoak), audit.openWatches(auditL4)
		auditMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if spreadWithin(r.Watches, soakInformers, soakSpreadTol) {
			r.SpreadOK = true
			r.SpreadAfterS = time.Since(spreadStart).Seconds()
			break
		}
		if time.Since(spreadStart) > soakSpreadWindow || ctx.Err() != nil {
			break
		}
		pause(ctx, 5*time.Second)
	}
	stopLoad()
	loadWG.Wait()
	stopSampler()
	r.DurationS = time.Since(r.start).Seconds()

	// The in-pod controllers still reconcile: 3 replicas, all Ready.
	// The deployment controller may write the Deployment between the
	// read and the write of its scale (its pods were still coming and
	// going): a conflict is read again, as kubectl scale does.
	deps := cp.AdminClient.AppsV1().Deployments(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := deps.GetScale(ctx, "soak", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = 3
		_, err = deps.UpdateScale(ctx, "soak", sc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Error(err)
	}
	if _, err := e.waitPodsReady(ctx, ns, "app=soak", 3, 3*time.Minute); err != nil {
		r.Deployment = err.Error()
		t.Errorf("after the soak the in-pod controllers did not bring Deployment soak to 3 Ready pods: %v", err)
	} else {
		r.Deployment = "3/3 Ready"
	}

	r.Writes = soakCheckWrites(ctx, t, cp, ns, &ledger)
	for _, op := range ledger.snapshot() {
		if op.Err != "" {
			r.WriteFailures = append(r.WriteFailures, op)
		}
	}
	r.WriteErrors = len(r.WriteFailures)
	r.Reads, r.ReadFailures = reads.snapshot()
	r.attribute()
	r.RelistsFanout, r.RelistsL4 = fanoutLists.Total()-fanoutBase, l4Lists.Total()-l4Base
	r.WatchErrors = [2]int64{fanoutLists.WatchErrors(), l4Lists.WatchErrors()}
	r.trends()
	r.shareWindows(audit)
	r.WallS = time.Since(wallStart).Seconds()
	r.judge(t)

	if b, err := json.MarshalIndent(r, "", "  "); err != nil {
		t.Error(err)
	} else if err := os.WriteFile(filepath.Join(out, "soak.json"), b, 0o644); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(filepath.Join(out, "soak.svg"), []byte(svgPlot(r, audit)), 0o644); err != nil {
		t.Error(err)
	}
	t.Log("\n" + r.summary(out))
}

// startL4ProxyFor starts a round-robin TCP balancer over cp's apiservers,
// closed when t ends.
func startL4ProxyFor(t *testing.T, cp *harness.ControlPlane) *harness.L4Proxy {
	t.Helper()
	var backends []string
	for _, ep := range cp.Endpoints() {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, u.Host)
	}
	proxy, err := harness.StartL4Proxy(backends)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
}

// soakClient is a client of cfg without client-side rate limits: the
// soak's own pacing is the load.
// timeout bounds each request (0 for the informers: it would end
// their watches too).
func soakClient(t *testing.T, cfg *rest.Config, timeout time.Duration) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = timeout
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// soakRBAC lets the soak's users (the one through fanout, the L4 one and
// the hog) write ConfigMaps, watch Pods and scale Deployments in ns.
func soakRBAC(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns string, users ...string) {
	t.Helper()
	rbac := cp.AdminClient.RbacV1()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "soak", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "list", "watch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/scale"}, Verbs: []string{"get", "update"}},
		},
	}
	if _, err := rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "soak", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "soak"},
	}
	for _, u := range users {
		rb.Subjects = append(rb.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		for _, res := range []string{"configmaps", "pods"} {
			for _, verb := range []string{"list", "watch"} {
				if err := cp.WaitAuthorized(ctx, u, verb, res, ns); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// soakCheckWrites lists every ConfigMap of ns from the apiservers, as
// kubernetes-admin, directly (a quorum read: no watch cache), trying each
// apiserver in turn, and checks the ledger against them.
func soakCheckWrites(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns string, l *soakLedger) soakWriteCheck {
	t.Helper()
	var errs []string
	for range 3 {
		for _, a := range cp.APIServers {
			cfg := rest.CopyConfig(cp.Admin)
			cfg.Host = a.URL
			cfg.Timeout = 30 * time.Second
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			asOf := time.Now()
			list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				// The ledger as of now, not asOf: a delete that began
				// after asOf may already show in the list.
				return checkWrites(l.snapshot(), list.Items, asOf)
			}
			errs = append(errs, fmt.Sprintf("apiserver %d: %v", a.Index+1, err))
		}
		pause(ctx, 5*time.Second)
	}
	t.Fatalf("listing the soak's ConfigMaps for the write check failed on every apiserver: %s", strings.Join(errs, "; "))
	return soakWriteCheck{}
}

// attribute assigns each failed read to the fault window it overlaps
// (the fault's start to its end plus the grace), and measures each
// fault's failures and how late after its end they came.
func (r *soakReport) attribute() {
	grace := time.Duration(r.GraceS * float64(time.Second))
	for i := range r.Faults {
		f := &r.Faults[i]
		f.StartS, f.EndS = f.Start.Sub(r.start).Seconds(), f.End.Sub(r.start).Seconds()
	}
	lag := func(f *soakFaultReport, start time.Time) {
		if d := start.Sub(f.End).Seconds(); f.MaxLagS == nil || d > *f.MaxLagS {
			f.MaxLagS = &d
		}
	}
	in := func(start, end time.Time) int {
		for i := range r.Faults {
			f := &r.Faults[i]
			if !start.After(f.End.Add(grace)) && !end.Before(f.Start) {
				lag(f, start)
				return i
			}
		}
		return -1
	}
	r.ReadsOutside = 0
	for i := range r.ReadFailures {
		rf := &r.ReadFailures[i]
		rf.Fault = in(rf.Start, rf.End)
		if rf.Fault < 0 {
			r.ReadsOutside++
		} else {
			r.Faults[rf.Fault].ReadFailures++
		}
	}
	for _, op := range r.WriteFailures {
		if j := in(op.Start, op.End); j >= 0 {
			r.Faults[j].WriteErrors++
		}
	}
}

// trends fits the host fanout's RSS and goroutines over the samples of
// the run's last two thirds, after its first minute at least.
func (r *soakReport) trends() {
	var xs, rss, gs []float64
	from := max(60, r.DurationS/3)
	for _, s := range r.Samples {
		if s.At < from || s.RSSMiB == 0 {
			continue
		}
		xs = append(xs, s.At/3600)
		rss = append(rss, s.RSSMiB)
		gs = append(gs, s.Goroutines)
	}
	r.RSSSlope, r.GoroutineSlope = slope(xs, rss), slope(xs, gs)
	if len(xs) > 1 {
		r.FitSpanS = 3600 * (xs[len(xs)-1] - xs[0])
	}
	r.RSSLimit = soakLimit(soakRSSRate, soakRSSRise, r.FitSpanS/3600)
	r.GoroutineLim = soakLimit(soakGoroutineRate, soakGoroutineRise, r.FitSpanS/3600)
}

// shareWindows tallies each client's requests per apiserver over each
// 5-minute window of the soak (the last one shorter).
func (r *soakReport) shareWindows(a *soakAudit) {
	const per = int(5 * time.Minute / soakBucket)
	n := int(r.DurationS/soakBucket.Seconds()) + 1
	for from := 0; from < n; from += per {
		to := min(from+per, n)
		w := soakShareWindow{FromS: float64(from) * soakBucket.Seconds(), ToS: min(float64(to)*soakBucket.Seconds(), r.DurationS), Names: auditGroupNames[:]}
		for g := range auditGroups {
			w.Per = append(w.Per, a.window(g, from, to))
		}
		r.Windows = append(r.Windows, w)
	}
}

// judge applies the soak's limits and records each check's verdict.
func (r *soakReport) judge(t *testing.T) {
	t.Helper()
	check := func(name string, ok bool, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if ok {
			r.Checks[name] = "ok: " + msg
			return
		}
		r.Checks[name] = "FAIL: " + msg
		t.Errorf("%s: %s", name, msg)
	}
	check("writes", r.Writes.ok(), "%d lost %v, %d duplicated %v, %d unknown %v (want 0 each)",
		len(r.Writes.Lost), r.Writes.Lost, len(r.Writes.Duplicated), r.Writes.Duplicated, len(r.Writes.Unknown), r.Writes.Unknown)
	var outside []string
	for _, f := range r.ReadFailures {
		if f.Fault < 0 {
			outside = append(outside, fmt.Sprintf("%s at %s: %s", f.Kind, f.Start.Sub(r.start).Round(time.Millisecond), f.Err))
		}
	}
	check("reads", r.ReadsOutside == 0, "%d failed reads outside the fault windows (want 0) %v", r.ReadsOutside, outside)
	// fanout ≤ L4/10 in integers: while the L4 informers re-list fewer
	// than 10 times, the fanout ones may not re-list at all.
	check("relists", r.RelistsFanout*10 <= r.RelistsL4, "fanout's informers re-listed %d times, the L4 balancer's %d (want fanout ≤ L4/10)", r.RelistsFanout, r.RelistsL4)
	check("spread", r.SpreadOK, "open watches per apiserver %v (want each 33%% ± %.0f points of %d)", r.Watches, 100*soakSpreadTol, soakInformers)
	check("rss", r.RSSSlope <= r.RSSLimit, "RSS slope %+.1f MiB/h over %.0f s (limit %.0f)", r.RSSSlope, r.FitSpanS, r.RSSLimit)
	check("goroutines", r.GoroutineSlope <= r.GoroutineLim, "goroutine slope %+.0f /h over %.0f s (limit %.0f)", r.GoroutineSlope, r.FitSpanS, r.GoroutineLim)
	check("controllers", r.Deployment == "3/3 Ready", "Deployment soak: %s", r.Deployment)
	for _, f := range r.Faults {
		check(fmt.Sprintf("fault %.0fs %s", f.StartS, f.Kind), f.Err == "", "%s, %.1f s%s", f.Target, f.EndS-f.StartS, map[bool]string{true: "", false: ": " + f.Err}[f.Err == ""])
	}
}

// summary is the one-screen report.
func (r *soakReport) summary(out string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SOAK seed %d, %s of load, %s wall (%s of it the real node's setup); report %s/soak.json, plot %s/soak.svg\n",
		r.Seed, time.Duration(r.DurationS*float64(time.Second)).Round(time.Second), time.Duration(r.WallS*float64(time.Second)).Round(time.Second),
		time.Duration(r.EnvS*float64(time.Second)).Round(time.Second), out, out)
	fmt.Fprintf(&b, "faults (window = start .. end + %.0f s grace):\n", r.GraceS)
	for _, f := range r.Faults {
		lag := ""
		if f.MaxLagS != nil {
			lag = fmt.Sprintf(", the last began %+.1f s after its end", *f.MaxLagS)
		}
		fmt.Fprintf(&b, "  %6.0fs %-15s %-30s %5.1f s  failed reads %3d, write errors %3d%s\n",
			f.StartS, f.Kind, f.Target, f.EndS-f.StartS, f.ReadFailures, f.WriteErrors, lag)
	}
	for _, op := range r.WriteFailures {
		fmt.Fprintf(&b, "  write error: %s %s at %.1f s, %.1f s: %s\n", op.Kind, op.ID,
			op.Start.Sub(r.start).Seconds(), op.End.Sub(op.Start).Seconds(), op.Err)
	}
	w := r.Writes
	fmt.Fprintf(&b, "writes: %d (%d confirmed, %d indeterminate); lost %d, duplicated %d, unknown %d; %d objects at the end\n",
		w.Writes, w.Confirmed, w.Indeterminate, len(w.Lost), len(w.Duplicated), len(w.Unknown), w.Objects)
	fmt.Fprintf(&b, "reads: %d, failed %d, of which outside fault windows %d\n", r.Reads, len(r.ReadFailures), r.ReadsOutside)
	fmt.Fprintf(&b, "re-lists: fanout %d, L4 %d (watch errors %d / %d)\n", r.RelistsFanout, r.RelistsL4, r.WatchErrors[0], r.WatchErrors[1])
	fmt.Fprintf(&b, "watch spread at the end: fanout %v (within 33%% ± %.0f: %v, %.0f s after the soak's duration), L4 %v\n", r.Watches, 100*soakSpreadTol, r.SpreadOK, r.SpreadAfterS, r.L4Watches)
	fmt.Fprintf(&b, "host fanout: RSS slope %+.2f MiB/h, goroutine slope %+.1f /h", r.RSSSlope, r.GoroutineSlope)
	if n := len(r.Samples); n > 0 {
		fmt.Fprintf(&b, " (last: %.1f MiB, %.0f goroutines)", r.Samples[n-1].RSSMiB, r.Samples[n-1].Goroutines)
	}
	b.WriteString("\nshares per 5-minute window:\n")
	for _, win := range r.Windows {
		fmt.Fprintf(&b, "  %4.0f–%4.0fs", win.FromS, win.ToS)
		for g, c := range win.Per {
			if g == auditL4 {
				continue
			}
			var pcts []string
			for _, s := range harness.Shares(c) {
				pcts = append(pcts, fmt.Sprintf("%.0f", 100*s))
			}
			fmt.Fprintf(&b, "  %s %s%% of %d", strings.Fields(win.Names[g])[0], strings.Join(pcts, "/"), sumInts(c))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "deployment: %s\n", r.Deployment)
	for _, k := range []string{"writes", "reads", "relists", "spread", "rss", "goroutines", "controllers"} {
		fmt.Fprintf(&b, "  %-11s %s\n", k, r.Checks[k])
	}
	return b.String()
}
