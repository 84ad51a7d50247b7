package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// client is one controller-like client of the demo: informers that keep
// watches open, and a worker that creates, reads, lists, updates and
// deletes ConfigMaps at a steady rate. Both go through one rest.Config, so
// client-go multiplexes them over one HTTP/2 connection, the way a real
// controller does. It counts what a user of it would notice: requests that
// failed, re-lists, and watches that ended with an error.
type client struct {
	// name is also the user name and the namespace.
	name string
	// label is what the table calls it, e.g. "via fanout", and note the
	// path its requests take.
	label, note string

	sent, failed atomic.Int64
	// lists counts each informer's lists apart: its first is its start,
	// every further one a re-list. Made with the client (newClient), so
	// that counts may read it while run starts the informers.
	lists []harness.Lists

	// onFailure is told about each failed request (the first error of a
	// burst is worth showing).
	onFailure func(c *client, err error)
}

// counts is a snapshot of a client's counters.
type counts struct {
	sent, failed, relists, watchErrors int64
}

func (c *client) counts() counts {
	var relists, watchErrors int64
	for i := range c.lists {
		relists += max(c.lists[i].Total()-1, 0)
		watchErrors += c.lists[i].WatchErrors()
	}
	return counts{sent: c.sent.Load(), failed: c.failed.Load(), relists: relists, watchErrors: watchErrors}
}

// newClient is a client that keeps watches informers.
func newClient(name, label string, watches int) *client {
	return &client{name: name, label: label, lists: make([]harness.Lists, watches)}
}

// run creates the client's namespace, starts its informers and waits
// for them to sync (telling synced), then sends rate requests a second
// until ctx ends. Only a failure to start is returned: failed requests
// later are counted, as a user would see them in the client's log.
func (c *client) run(ctx context.Context, cfg *rest.Config, rate int, synced func()) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(rate*2), rate*2
	cfg.UserAgent = c.name
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", c.name, err)
	}
	cms := cs.CoreV1().ConfigMaps(c.name)
	watches := len(c.lists)
	var hasSynced []cache.InformerSynced
	for i := range watches {
		// One informer per label value: each holds its own watch open.
		selector := fmt.Sprintf("shard=%d", i)
		inf, err := harness.CountedInformer(&c.lists[i], &corev1.ConfigMap{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = selector
				return cms.List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = selector
				return cms.Watch(ctx, o)
			})
		if err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
		hasSynced = append(hasSynced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), hasSynced...) {
		return nil // ctx ended
	}
	synced()

	// Five requests per tick: create, get, list, update, delete.
	tick := time.NewTicker(time.Second / time.Duration(max(rate/5, 1)))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		c.cycle(ctx, cms, n, watches)
	}
}

// cycle sends one create, get, list, update and delete, going on after a
// failure the way a controller's next reconcile would.
func (c *client) cycle(ctx context.Context, cms interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
	List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, n, watches int) {
	name := fmt.Sprintf("cm-%d", n)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"shard": fmt.Sprint(rand.IntN(max(watches, 1)))}},
		Data:       map[string]string{"n": fmt.Sprint(n)},
	}
	check := func(what string, err error) bool {
		c.sent.Add(1)
		if err != nil && ctx.Err() == nil {
			c.failed.Add(1)
			if c.onFailure != nil {
				c.onFailure(c, fmt.Errorf("%s %s: %w", what, name, err))
			}
		}
		return err == nil
	}
	_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	created := check("create", err)
	got, err := cms.Get(ctx, name, metav1.GetOptions{})
	if !check("get", err) {
		got = nil
	}
	_, err = cms.List(ctx, metav1.ListOptions{Limit: 50})
	check("list", err)
	if got != nil {
		got.Data["updated"] = "yes"
		_, err = cms.Update(ctx, got, metav1.UpdateOptions{})
		check("update", err)
	}
	if created || got != nil {
		check("delete", cms.Delete(ctx, name, metav1.DeleteOptions{}))
	}
}

// failureLog keeps failed requests for the events panel, one line per
// burst: a failing client fails many requests in a row, and one line with
// a count says as much as a screenful.
type failureLog struct {
	ev *events
	mu sync.Mutex
	// last is when each client last failed, by name.
	last map[string]time.Time
}

func (f *failureLog) record(c *client, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if t, ok := f.last[c.name]; ok && now.Sub(t) < 5*time.Second {
		f.last[c.name] = now
		f.ev.repeat(c.label)
		return
	}
	f.last[c.name] = now
	f.ev.addKeyed(c.label, "%s: request failed: %v", c.label, err)
}
