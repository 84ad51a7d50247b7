package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// envUpgradeFrom names the release TestUpgradeRoll upgrades from (make
// upgrade sets it); unset, the test is skipped.
const envUpgradeFrom = "FANOUT_UPGRADE_FROM"

// TestUpgradeRoll is a real upgrade: three apiservers of the release in
// FANOUT_UPGRADE_FROM (v1.36.3 in make upgrade), under that release's
// kube-controller-manager and kube-scheduler (each behind a fanout
// sidecar), are rolled one by one to the e2e module's release (v1.37.2):
// each stopped gracefully and started from the new binary at the same
// address, with the same flags and the same etcd, no emulation flags.
// Three sets of clients run the same load through the whole roll, each as
// its own user: through a fanout sidecar, through the harness's round-robin
// L4 proxy, and directly (three clients, each pinned to one apiserver as a
// kubeconfig would be). Each writes and reads ConfigMaps and runs
// informers on ConfigMaps and Pods; once the first apiserver runs the new
// release, the two releases' discovery is diffed, the difference logged,
// and each set also lists and watches a resource that only the new release
// serves. Counted per set, on the wire: failed requests (5xx, 429,
// transport errors), 404s, and informer re-lists. Through fanout none may
// fail and none may be answered 404; the direct clients must see 404s
// (proof that the skew is real). The L4 and direct figures are logged
// beside fanout's, for docs/resilience.md.
func TestUpgradeRoll(t *testing.T) {
	from := os.Getenv(envUpgradeFrom)
	if from == "" {
		t.Skip("set " + envUpgradeFrom + "=v1.36.3 to run it (make upgrade)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	old, err := harness.ReleaseBinaries(ctx, from, testLogWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := harness.Start(ctx, t, harness.Options{
		Nodes:              3,
		Logf:               t.Logf,
		APIServerArgs:      shutdownArgs,
		PerAPIServerBinary: []string{old.KubeAPIServer, old.KubeAPIServer, old.KubeAPIServer},
		ComponentBins:      old,
	})
	if err != nil {
		t.Fatal(err)
	}
	to := cp.Bins.Version
	for _, a := range cp.APIServers {
		checkRelease(ctx, t, a, from)
	}
	t.Logf("3 apiservers of %s up; rolling them to %s", from, to)

	// The old release's controllers, each behind its sidecar.
	ctrl := startControllers(ctx, t, cp, "upgrade-")

	// The three client sets.
	const ns = "e2e-upgrade"
	if _, err := cp.AdminClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	userConfig := func(user string) *rest.Config {
		kc, err := cp.UserKubeconfig(user, "system:masters")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := harness.RESTConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	fanoutUser, l4User, directUser := "e2e-upgrade-fanout", "e2e-upgrade-l4", "e2e-upgrade-direct"
	fanoutKubeconfig, err := cp.UserKubeconfig(fanoutUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := cp.StartFanout(ctx, t, "upgrade-client", fanoutKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startL4ProxyFor(t, cp)
	l4 := userConfig(l4User)
	_, port, _ := net.SplitHostPort(proxy.Addr())
	l4.Host = "https://127.0.0.1:" + port
	var pinned []*rest.Config
	for _, a := range cp.APIServers {
		cfg := userConfig(directUser)
		cfg.Host = a.URL
		pinned = append(pinned, cfg)
	}
	modes := []*rollMode{
		{name: "fanout", user: fanoutUser, cfgs: []*rest.Config{sidecar.Config}},
		{name: "L4 proxy", user: l4User, cfgs: []*rest.Config{l4}},
		{name: "direct", user: directUser, cfgs: pinned},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the client sidecar log %s:\n%s", sidecar.LogPath, harness.Tail(sidecar.LogPath, 30))
		}
	})
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	for i, m := range modes {
		m.start(loadCtx, t, ns, fmt.Sprintf("u%d-", i))
	}
	deploy := startScaler(loadCtx, t, modes[0].config(0, 30*time.Second, 10), ns)
	sidecars := []*harness.Fanout{sidecar, ctrl.kcmSidecar, ctrl.schedSidecar}
	before := sidecarFailures(ctx, t, sidecars)

	time.Sleep(5 * time.Second) // load before the roll, as the roll tests do
	rollStart := time.Now()
	var skew schema.GroupVersionResource
	for i, victim := range cp.APIServers {
		stepStart := time.Now()
		if err := victim.RestartFrom(ctx, cp.Bins.KubeAPIServer); err != nil {
			t.Fatal(err)
		}
		checkRelease(ctx, t, victim, to)
		ready := time.Now()
		for _, f := range sidecars {
			waitMetricExact(ctx, t, f, "fanout_endpoints", map[string]string{"state": "ready"}, float64(len(cp.APIServers)))
		}
		t.Logf("apiserver %d: stopped and started from %s, ready in %s; every sidecar sees it ready %s later",
			victim.Index+1, to, ready.Sub(stepStart).Round(time.Millisecond), time.Since(ready).Round(time.Millisecond))
		if i == 0 {
			skew = diffDiscovery(ctx, t, cp, victim, cp.APIServers[1], to, from)
			// Only once fanout has read the new apiserver's discovery
			// can it tell where the new resource is served.
			waitMetricExact(ctx, t, sidecar, "fanout_apis_differ", nil, 1)
			for _, m := range modes {
				m.startSkew(loadCtx, t, skew, m == modes[0])
			}
		}
	}
	rolled := time.Now()
	t.Logf("roll %s → %s done in %s", from, to, rolled.Sub(rollStart).Round(time.Second))
	waitMetricExact(ctx, t, sidecar, "fanout_apis_differ", nil, 0)
	// The old controllers still do their work on the new apiservers.
	waitDeployment(ctx, t, cp, ns, deploy, []*harness.Component{ctrl.kcm, ctrl.sched})
	// Stop counting first: what a cancelled request reports is no
	// failure.
	for _, m := range modes {
		m.wire.stopped.Store(true)
	}
	stopLoad()
	for _, m := range modes {
		m.workers.Wait()
	}
	after := sidecarFailures(ctx, t, sidecars)

	t.Logf("upgrade roll %s → %s, per client set (requests on the wire; failed = 5xx, 429 or transport error):", from, to)
	t.Logf("%-9s %9s %7s %5s %9s %13s  %s", "clients", "requests", "failed", "404", "re-lists", "cycles failed", "404s answered per apiserver (audit log)")
	for _, m := range modes {
		nf, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
			return e.User.Username == m.user && e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusNotFound
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-9s %9d %7d %5d %9d %13d  %v", m.name, m.wire.requests.Load(), m.wire.failed.Load(), m.wire.notFound.Load(),
			m.relists(), m.cyclesFailed.Load(), nf)
		for _, s := range m.wire.firstSamples() {
			t.Logf("  %s: %s", m.name, s)
		}
	}
	for i, f := range sidecars {
		t.Logf("sidecar %s answered %v requests with a 5xx or 429 during the roll", f.Name, after[i]-before[i])
	}

	fm, dm := modes[0], modes[2]
	if n := fm.wire.failed.Load(); n > 0 {
		t.Errorf("through fanout %d requests failed during the roll, want 0", n)
	}
	if n := fm.wire.notFound.Load(); n > 0 {
		t.Errorf("through fanout %d requests were answered 404 during the roll, want 0", n)
	}
	if n := fm.cyclesFailed.Load(); n > 0 {
		t.Errorf("through fanout %d load cycles failed, want 0: %v", n, fm.firstErrors())
	}
	for i, f := range sidecars[1:] {
		if n := after[i+1] - before[i+1]; n > 0 {
			t.Errorf("the sidecar %s answered %v requests of the %s controllers with a 5xx or 429 during the roll, want 0", f.Name, n, from)
		}
	}
	if dm.wire.notFound.Load() == 0 {
		t.Errorf("the direct clients saw no 404 for %s although one of them stayed on %s until the last step: the releases do not differ there, and the test proves nothing", skew, from)
	}
}

// checkRelease fails t unless apiserver a runs release (v1.X.Y), by the
// emulation version on /version, which a binary of release 1.X reports
// unless told to emulate another.
func checkRelease(ctx context.Context, t *testing.T, a *harness.APIServer, release string) {
	t.Helper()
	v, err := a.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := "v" + v.EmulationMajor + "." + v.EmulationMinor + "."
	if !strings.HasPrefix(release, got) {
		t.Fatalf("apiserver %d reports emulation version %s.%s (gitVersion %s), want the release of %s (%s)",
			a.Index+1, v.EmulationMajor, v.EmulationMinor, v.GitVersion, release, a.Binary())
	}
}

// waitMetricExact waits up to 2 minutes until fanout's series
// name{labels} is want.
func waitMetricExact(ctx context.Context, t *testing.T, f *harness.Fanout, name string, labels map[string]string, want float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := f.Metric(name, labels)
		if err == nil && v == want {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("sidecar %s: %s%v = %v (err %v) after 2 minutes, want %v; its log:\n%s", f.Name, name, labels, v, err, want, harness.Tail(f.LogPath, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sidecarFailures reads each sidecar's 5xx and 429 answers to its client
// (fanout_requests_total).
func sidecarFailures(ctx context.Context, t *testing.T, sidecars []*harness.Fanout) []float64 {
	t.Helper()
	out := make([]float64, len(sidecars))
	for i, f := range sidecars {
		body := httpGet(ctx, t, "http://"+f.AdminAddress+"/metrics")
		out[i] = metricSum(body, "fanout_requests_total", `code="5`) + metricSum(body, "fanout_requests_total", `code="429"`)
	}
	return out
}

// diffDiscovery reads the discovery of apiserver a (release newRel) and b
// (oldRel) directly, logs the resources each serves that the other does
// not, and returns the one the test loads: the first (by name) listable
// and watchable resource that only a serves, preferring one whose whole
// group/version is new.
func diffDiscovery(ctx context.Context, t *testing.T, cp *harness.ControlPlane, a, b *harness.APIServer, newRel, oldRel string) schema.GroupVersionResource {
	t.Helper()
	served := func(s *harness.APIServer) (map[schema.GroupVersionResource]bool, map[schema.GroupVersion]bool) {
		cfg := rest.CopyConfig(cp.Admin)
		cfg.Host = s.URL
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatalf("discovery of apiserver %d: %v", s.Index+1, err)
		}
		res, gvs := map[schema.GroupVersionResource]bool{}, map[schema.GroupVersion]bool{}
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				t.Fatal(err)
			}
			gvs[gv] = true
			for _, r := range l.APIResources {
				if !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
					res[gv.WithResource(r.Name)] = true
				}
			}
		}
		return res, gvs
	}
	newRes, newGVs := served(a)
	oldRes, oldGVs := served(b)
	only := func(x, y map[schema.GroupVersionResource]bool) []schema.GroupVersionResource {
		var out []schema.GroupVersionResource
		for r := range x {
			if !y[r] {
				out = append(out, r)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
		return out
	}
	added, removed := only(newRes, oldRes), only(oldRes, newRes)
	t.Logf("discovery: %s (apiserver %d) serves %d listable resources, %s (apiserver %d) %d; only %s: %v; only %s: %v",
		newRel, a.Index+1, len(newRes), oldRel, b.Index+1, len(oldRes), newRel, added, oldRel, removed)
	if len(added) == 0 {
		t.Fatalf("%s serves no listable resource that %s does not: nothing to load across the skew", newRel, oldRel)
	}
	pick := added[0]
	for _, r := range added {
		if newGVs[r.GroupVersion()] && !oldGVs[r.GroupVersion()] {
			pick = r
			break
		}
	}
	t.Logf("loading %s (group/version %s served by %s only: %v) from now on", pick, pick.GroupVersion(), newRel, !oldGVs[pick.GroupVersion()])
	return pick
}

// rollMode is one set of clients of TestUpgradeRoll: one user, one
// rest.Config per client (the direct set pins one to each apiserver).
type rollMode struct {
	name, user string
	cfgs       []*rest.Config
	wire       wireCounts
	lists      harness.Lists
	informers  atomic.Int64
	// skew holds the resource only the new release serves, once known.
	skew         atomic.Pointer[schema.GroupVersionResource]
	cyclesFailed atomic.Int64
	mu           sync.Mutex
	errs         []error
	workers      sync.WaitGroup
}

// Per client set: ConfigMap cycles from 6 workers at 30 requests/s in all,
// 6 ConfigMap informers, 3 Pod informers, and 3 informers on the new
// resource once it is known; spread over the set's clients.
const (
	rollWorkers      = 6
	rollQPS          = 30
	rollCMInformers  = 6
	rollPodInformers = 3
	rollNewInformers = 3
)

// config is m's client i with the wire counted; timeout 0 is for
// informers (a timeout would end their watches).
func (m *rollMode) config(i int, timeout time.Duration, qps float32) *rest.Config {
	cfg := rest.CopyConfig(m.cfgs[i%len(m.cfgs)])
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = qps, int(qps)+1
	cfg.Wrap(m.wire.wrap)
	return cfg
}

func (m *rollMode) start(ctx context.Context, t *testing.T, ns, prefix string) {
	t.Helper()
	n := len(m.cfgs)
	var synced []cache.InformerSynced
	for i := range n {
		client, err := kubernetes.NewForConfig(m.config(i, 0, 1000))
		if err != nil {
			t.Fatal(err)
		}
		cms, pods := client.CoreV1().ConfigMaps(ns), client.CoreV1().Pods(ns)
		for range rollCMInformers / n {
			synced = append(synced, m.informer(ctx, t, &corev1.ConfigMap{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, o) }, cms.Watch))
		}
		for range rollPodInformers / n {
			synced = append(synced, m.informer(ctx, t, &corev1.Pod{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }, pods.Watch))
		}
		loadCfg := m.config(i, 30*time.Second, float32(rollQPS)/float32(n))
		lc, err := kubernetes.NewForConfig(loadCfg)
		if err != nil {
			t.Fatal(err)
		}
		dyn, err := dynamic.NewForConfig(loadCfg)
		if err != nil {
			t.Fatal(err)
		}
		lcms := lc.CoreV1().ConfigMaps(ns)
		for w := range rollWorkers / n {
			m.workers.Go(func() {
				for c := 0; ctx.Err() == nil; c++ {
					var sent int64
					err := cycle(ctx, lcms, fmt.Sprintf("%s%d-%d-%d", prefix, i, w, c), &sent)
					if gvr := m.skew.Load(); err == nil && gvr != nil {
						if _, lerr := dyn.Resource(*gvr).List(ctx, metav1.ListOptions{Limit: 50}); lerr != nil {
							err = fmt.Errorf("list %s: %w", gvr, lerr)
						}
					}
					if err != nil && ctx.Err() == nil {
						m.cyclesFailed.Add(1)
						m.mu.Lock()
						if len(m.errs) < 5 {
							m.errs = append(m.errs, err)
						}
						m.mu.Unlock()
					}
				}
			})
		}
	}
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		t.Fatalf("%s: informers did not sync within 2 minutes", m.name)
	}
}

// startSkew starts m's informers on gvr and adds a LIST of it to every
// load cycle; with wait, it waits for the informers to sync.
func (m *rollMode) startSkew(ctx context.Context, t *testing.T, gvr schema.GroupVersionResource, wait bool) {
	t.Helper()
	m.skew.Store(&gvr)
	var synced []cache.InformerSynced
	for i := range rollNewInformers {
		dyn, err := dynamic.NewForConfig(m.config(i, 0, 1000))
		if err != nil {
			t.Fatal(err)
		}
		r := dyn.Resource(gvr)
		synced = append(synced, m.informer(ctx, t, &unstructured.Unstructured{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return r.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return r.Watch(ctx, o) }))
	}
	if !wait {
		return
	}
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		t.Fatalf("%s: informers on %s did not sync within 2 minutes", m.name, gvr)
	}
}

func (m *rollMode) informer(ctx context.Context, t *testing.T, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.InformerSynced {
	t.Helper()
	inf, err := harness.CountedInformer(&m.lists, obj, list, watchFn)
	if err != nil {
		t.Fatal(err)
	}
	m.informers.Add(1)
	m.workers.Go(func() { inf.RunWithContext(ctx) })
	return inf.HasSynced
}

// relists are the lists beyond each informer's first (a first list that
// failed, e.g. a 404, and was retried counts too).
func (m *rollMode) relists() int64 { return m.lists.Total() - m.informers.Load() }

func (m *rollMode) firstErrors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.errs)
}

// wireCounts counts a client set's requests as the transport sees them,
// each attempt on its own (client-go's own retries included).
type wireCounts struct {
	requests, failed, notFound atomic.Int64
	stopped                    atomic.Bool
	mu                         sync.Mutex
	samples                    []string
}

func (w *wireCounts) wrap(rt http.RoundTripper) http.RoundTripper {
	return testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if w.stopped.Load() {
			return resp, err
		}
		w.requests.Add(1)
		switch {
		case err != nil:
			w.failed.Add(1)
			w.sample("%s %s %s: %v", time.Now().Format("15:04:05.000"), r.Method, r.URL.Path, err)
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			w.failed.Add(1)
			w.sample("%s %s %s: %s", time.Now().Format("15:04:05.000"), r.Method, r.URL.Path, resp.Status)
		case resp.StatusCode == http.StatusNotFound:
			// No load here reads an object that is not there: every 404
			// is one too many.
			w.notFound.Add(1)
			w.sample("%s %s %s: %s", time.Now().Format("15:04:05.000"), r.Method, r.URL.Path, resp.Status)
		}
		return resp, err
	})
}

func (w *wireCounts) sample(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) < 8 {
		w.samples = append(w.samples, fmt.Sprintf(format, args...))
	}
}

func (w *wireCounts) firstSamples() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.samples)
}

// startScaler creates a Deployment in ns and scales it between 6 and 12
// replicas every 10 s until ctx ends, through cfg, so the old release's
// controller manager and scheduler have work throughout the roll. It
// returns the Deployment's name.
func startScaler(ctx context.Context, t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const name = "upgrade"
	labels := map[string]string{"app": "e2e-upgrade"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](6),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for n := int32(12); ; n = 18 - n {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			scale, err := client.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue // counted on the wire (the fanout set's)
			}
			scale.Spec.Replicas = n
			_, _ = client.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{})
		}
	}()
	return name
}

// waitDeployment waits up to 3 minutes until Deployment name in ns has as
// many pods as its replicas, all bound to a node: the controller manager
// and the scheduler kept working.
func waitDeployment(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns, name string, comps []*harness.Component) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for {
		for _, c := range comps {
			if err := c.Err(); err != nil {
				t.Fatalf("%s exited: %v", c.Name, err)
			}
		}
		d, err := cp.AdminClient.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			pods, perr := cp.AdminClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=e2e-upgrade"})
			if perr == nil {
				// Scaled-down pods stay Terminating: no kubelet confirms
				// their end.
				active, bound := 0, 0
				for _, p := range pods.Items {
					if p.DeletionTimestamp != nil {
						continue
					}
					active++
					if p.Spec.NodeName != "" {
						bound++
					}
				}
				last = fmt.Sprintf("%d replicas, %d pods not terminating, %d of them bound", *d.Spec.Replicas, active, bound)
				if bound == active && int32(bound) == *d.Spec.Replicas {
					t.Logf("deployment %s: %s", name, last)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment %s after 3 minutes: %s", name, last)
		}
		time.Sleep(time.Second)
	}
}
