package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// TestConsistentListAdvancesQuietBookmarks measures what fanout's watch
// freshness request relies on (docs/resilience.md, "Which watches, how
// many"): on a resource that sees no writes, kube-apiserver's bookmarks
// carry its watch cache's resourceVersion, which lags etcd; one consistent
// LIST (resourceVersion unset, limit=1) served from the watch cache makes
// the cacher request an etcd progress notify, and the next bookmark of a
// watch of that resource carries a
// resourceVersion at least the LIST's. For another resource's watch it
// logs what it sees (docs/resilience.md).
func TestConsistentListAdvancesQuietBookmarks(t *testing.T) {
	skipUnlessLong(t, "what freshness requests rely on; TestNodeQuietWatchesRespread and the unit tests of components/watch check the requests themselves")
	ctx, cp := ownControlPlane(t, 10*time.Minute, harness.Options{})
	admin := cp.AdminClient // apiserver 1, directly
	const nsCM, nsSecret, nsNoise = "e2e-quiet-cm", "e2e-quiet-secret", "e2e-quiet-noise"
	for _, ns := range []string{nsCM, nsSecret, nsNoise} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps(nsCM).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(nsSecret).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The etcd revision moves on, as in any cluster, through a Lease no
	// watch here follows.
	noiseCtx, stopNoise := context.WithCancel(ctx)
	var noise sync.WaitGroup
	defer func() { stopNoise(); noise.Wait() }()
	noise.Go(func() { tickLease(noiseCtx, t, cp, nsNoise) })

	// Watches from the cache's current state (a list at "0" is served from
	// the watch cache and requests no progress).
	open := func(name string, list func() (string, error), w func(metav1.ListOptions) (watch.Interface, error)) watch.Interface {
		rv, err := list()
		if err != nil {
			t.Fatal(err)
		}
		wi, err := w(metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: ptrInt64(600)})
		if err != nil {
			t.Fatalf("watching %s: %v", name, err)
		}
		t.Cleanup(wi.Stop)
		return wi
	}
	cmWatch := open("configmaps", func() (string, error) {
		l, err := admin.CoreV1().ConfigMaps(nsCM).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(o metav1.ListOptions) (watch.Interface, error) {
		return admin.CoreV1().ConfigMaps(nsCM).Watch(ctx, o)
	})
	secretWatch := open("secrets", func() (string, error) {
		l, err := admin.CoreV1().Secrets(nsSecret).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(o metav1.ListOptions) (watch.Interface, error) {
		return admin.CoreV1().Secrets(nsSecret).Watch(ctx, o)
	})
	opened := time.Now()

	// Each watch's bookmarks, as they come; nothing else is written there.
	type bookmark struct {
		at time.Time
		rv uint64
	}
	var measured atomic.Bool
	collect := func(name string, w watch.Interface) <-chan bookmark {
		out := make(chan bookmark, 16)
		go func() {
			defer close(out)
			for ev := range w.ResultChan() {
				if ev.Type != watch.Bookmark {
					if measured.Load() {
						return // the test is over: its watches end
					}
					t.Errorf("the %s watch got a %s event; nothing writes there", name, ev.Type)
					return
				}
				rv, err := metaRV(ev.Object)
				if err != nil {
					t.Error(err)
					return
				}
				out <- bookmark{at: time.Now(), rv: rv}
			}
		}()
		return out
	}
	cmBookmarks, secretBookmarks := collect("configmaps", cmWatch), collect("secrets", secretWatch)
	// drain returns the bookmarks that came until deadline, stopping at the
	// first with a resourceVersion of at least atLeast (0: none stops).
	drain := func(ch <-chan bookmark, deadline time.Time, atLeast uint64) []bookmark {
		var got []bookmark
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		for {
			select {
			case b, ok := <-ch:
				if !ok {
					t.Fatal("a watch ended")
				}
				got = append(got, b)
				if atLeast > 0 && b.rv >= atLeast {
					return got
				}
			case <-timer.C:
				return got
			}
		}
	}
	etcdRevision := func() uint64 {
		l, err := admin.CoordinationV1().Leases(nsNoise).Get(ctx, "rebalance-noise", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rv, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
		return rv
	}

	// Control: without a consistent LIST, over 75 s (kube-apiserver
	// sends a watcher a bookmark about once a minute, and only one newer
	// than what the watcher last sent).
	controlEnd := opened.Add(75 * time.Second)
	cm1, sec1 := drain(cmBookmarks, controlEnd, 0), drain(secretBookmarks, controlEnd, 0)
	rev1 := etcdRevision()
	t.Logf("75 s without a consistent LIST: configmaps bookmarks %v, secrets bookmarks %v (at, rv); the latest Lease write is at revision %d",
		cm1, sec1, rev1)
	for _, b := range append(append([]bookmark(nil), cm1...), sec1...) {
		if b.rv+50 >= rev1 {
			t.Errorf("a quiet watch's bookmark carries rv %d, not far behind the etcd revision %d: the test shows nothing", b.rv, rev1)
		}
	}

	// One consistent LIST of configmaps, limit=1, to apiserver 1.
	listed := time.Now()
	l, err := admin.CoreV1().ConfigMaps(nsCM).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(listed)
	listRV, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	deadline := listed.Add(75 * time.Second)
	cm2, sec2 := drain(cmBookmarks, deadline, listRV), drain(secretBookmarks, deadline, listRV)
	after := func(bs []bookmark) string {
		if len(bs) == 0 {
			return "none"
		}
		b := bs[len(bs)-1]
		return fmt.Sprintf("rv %d %s after the LIST", b.rv, b.at.Sub(listed).Round(time.Millisecond))
	}
	t.Logf("consistent LIST of configmaps (limit=1) answered in %s at rv %d (latest Lease write before it: %d); first bookmark at least as new: configmaps %s, secrets %s",
		took.Round(time.Millisecond), listRV, rev1, after(cm2), after(sec2))
	if len(cm2) == 0 || cm2[len(cm2)-1].rv < listRV {
		t.Errorf("no configmaps bookmark at rv >= %d within 75 s of a consistent LIST: the LIST did not advance its cache (got %v)", listRV, cm2)
	}
	// Another resource's cache is not asserted: measured on 2026-12-04,
	// the secrets watch's next bookmark carried an older resourceVersion
	// than the configmaps LIST's, so fanout asks once per resource.
	measured.Store(true)
}

func ptrInt64(v int64) *int64 { return &v }

// metaRV returns the resourceVersion of a watch event's object.
func metaRV(o any) (uint64, error) {
	m, err := meta.Accessor(o)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(m.GetResourceVersion(), 10, 64)
}
