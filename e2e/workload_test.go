package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// userNamespace creates namespace ns and lets user work with ConfigMaps in
// it through plain RBAC, as a typical controller's user does: no
// system:masters shortcut.
func userNamespace(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns, user string) {
	t.Helper()
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	// A Role of our own rather than the edit ClusterRole: edit is
	// aggregated by kube-controller-manager, which may not be running.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"create", "get", "list", "watch", "update", "patch", "delete"},
		}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating role in %s: %v", ns, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding %s to the configmaps role in %s: %v", user, ns, err)
	}
	for _, verb := range []string{"create", "get", "list", "watch", "update", "delete"} {
		if err := cp.WaitAuthorized(ctx, user, verb, "configmaps", ns); err != nil {
			t.Fatal(err)
		}
	}
}

// workload is the mixed traffic of one client: watchers watch ConfigMaps in
// ns for the whole run while workers cycle create, get, list, update,
// delete.
type workload struct {
	requests int // at least this many short requests
	workers  int
	watches  int
	// whileWatching, when set, runs once every watch is open and before
	// the workers start.
	whileWatching func()
	// onStall, when set, runs when some watch still lacks events 30 s
	// after the workers finished, before the watches are cut: the moment
	// to take evidence (a goroutine dump) of what holds them.
	onStall func(perWatch []int64)
	// recordEarlyEnds, when set, records a watch whose stream ended before
	// the run was over in workloadResult.ended instead of failing the
	// test: the caller decides whether the end is explained.
	recordEarlyEnds bool
}

type workloadResult struct {
	requests int64   // short requests issued, watches excluded
	events   int64   // watch events received, over all watches
	perWatch []int64 // watch events received by each watch
	ended    []bool  // with recordEarlyEnds: the watch's stream ended early
	elapsed  time.Duration
}

// checkWatches fails t unless every watch saw every event: three (added,
// modified, deleted) per ConfigMap the workers cycled. A proxy that drops,
// stalls or silently ends a watch shows up here, not only as a bad share.
func (w workload) checkWatches(t *testing.T, res workloadResult) {
	t.Helper()
	want := int64(3 * w.iterations() * w.workers)
	for i, n := range res.perWatch {
		if n != want {
			t.Errorf("watch %d saw %d events, want %d (all watches: %v)", i, n, want, res.perWatch)
		}
	}
}

const perIteration = 5 // requests in one cycle

func (w workload) iterations() int {
	return (w.requests + perIteration*w.workers - 1) / (perIteration * w.workers)
}

func (w workload) run(ctx context.Context, t *testing.T, cfg *rest.Config, ns string) workloadResult {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	// client-go's default 5 QPS would make 3,000 requests take ten minutes.
	// No cfg.Timeout: it would cut the watches too.
	cfg.QPS = 1000
	cfg.Burst = 2000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(ns)
	start := time.Now()

	var res workloadResult
	watchCtx, stopWatches := context.WithCancel(ctx)
	var watchers sync.WaitGroup
	res.perWatch = make([]int64, w.watches)
	res.ended = make([]bool, w.watches)
	want := int64(3 * w.iterations() * w.workers)
	for i := 0; i < w.watches; i++ {
		wt, err := cms.Watch(watchCtx, metav1.ListOptions{})
		if err != nil {
			stopWatches()
			t.Fatalf("starting watch %d: %v", i, err)
		}
		watchers.Go(func() {
			defer wt.Stop()
			for {
				select {
				case <-watchCtx.Done():
					return
				case ev, ok := <-wt.ResultChan():
					if !ok {
						if watchCtx.Err() == nil && w.recordEarlyEnds {
							res.ended[i] = true
							t.Logf("watch %d ended early, after %d events", i, atomic.LoadInt64(&res.perWatch[i]))
						} else if watchCtx.Err() == nil {
							t.Errorf("watch %d ended early, after %d events", i, atomic.LoadInt64(&res.perWatch[i]))
						}
						return
					}
					if ev.Type == watch.Error {
						t.Errorf("watch %d got an error event: %v", i, ev.Object)
						continue
					}
					atomic.AddInt64(&res.events, 1)
					if atomic.AddInt64(&res.perWatch[i], 1) == want {
						return // everything arrived; nothing more is due
					}
				}
			}
		})
	}

	if w.whileWatching != nil {
		w.whileWatching()
	}
	iterations := w.iterations()
	errs := make(chan error, w.workers)
	var workers sync.WaitGroup
	for wk := 0; wk < w.workers; wk++ {
		workers.Go(func() {
			for i := 0; i < iterations; i++ {
				if err := cycle(ctx, cms, fmt.Sprintf("w%d-%d", wk, i), &res.requests); err != nil {
					errs <- fmt.Errorf("worker %d, iteration %d: %w", wk, i, err)
					return
				}
			}
		})
	}
	workers.Wait()
	// The last events may still be on their way; give the watches a
	// moment to finish before cutting them.
	watchesDone := make(chan struct{})
	go func() { watchers.Wait(); close(watchesDone) }()
	select {
	case <-watchesDone:
	case <-time.After(30 * time.Second):
		if w.onStall != nil {
			now := make([]int64, len(res.perWatch))
			for i := range now {
				now[i] = atomic.LoadInt64(&res.perWatch[i])
			}
			w.onStall(now)
		}
	}
	stopWatches()
	<-watchesDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res.elapsed = time.Since(start)
	return res
}

// cycle is one create, get, list, update and delete of ConfigMap name.
func cycle(ctx context.Context, cms interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
	List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, name string, count *int64) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"step": "created"}}
	atomic.AddInt64(count, 1)
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	atomic.AddInt64(count, 1)
	got, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	atomic.AddInt64(count, 1)
	if _, err := cms.List(ctx, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	got.Data["step"] = "updated"
	atomic.AddInt64(count, 1)
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	atomic.AddInt64(count, 1)
	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// backgroundLoad is a client that keeps cycling ConfigMaps from 4 workers
// until Stop: the steady traffic of the fault tests. Every failed cycle is
// an error the client saw.
type backgroundLoad struct {
	sent, failed atomic.Int64
	firstErrs    sync.Map // up to 5 of them, by worker and cycle
	stop         context.CancelFunc
	workers      sync.WaitGroup
}

func startLoad(ctx context.Context, t *testing.T, cfg *rest.Config, ns, prefix string) *backgroundLoad {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(ns)
	l := &backgroundLoad{}
	ctx, l.stop = context.WithCancel(ctx)
	t.Cleanup(l.Stop)
	for wk := 0; wk < 4; wk++ {
		l.workers.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				var n int64
				err := cycle(ctx, cms, fmt.Sprintf("%s%d-%d", prefix, wk, i), &n)
				l.sent.Add(n)
				if err != nil && ctx.Err() == nil && l.failed.Add(1) <= 5 {
					l.firstErrs.Store(fmt.Sprintf("worker %d cycle %d", wk, i), err)
				}
			}
		})
	}
	return l
}

// Stop ends the load and waits for the workers; it is idempotent.
func (l *backgroundLoad) Stop() {
	l.stop()
	l.workers.Wait()
}

// reportErrors fails t with the first errors the client saw.
func (l *backgroundLoad) reportErrors(t *testing.T) {
	t.Helper()
	l.firstErrs.Range(func(k, v any) bool {
		t.Errorf("%s: %v", k, v)
		return true
	})
}

// servedBetween counts the requests of user that apiserver a served in a
// time window, by the audit log's timestamps (health probes excluded).
func servedBetween(t *testing.T, cp *harness.ControlPlane, a *harness.APIServer, user string, from, to time.Time) int {
	t.Helper()
	counts, err := cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
		return e.User.Username == user && e.StageTimestamp.After(from) && e.StageTimestamp.Before(to)
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts[a.Index]
}
