package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The soak's load besides the in-pod controllers: writers whose every
// write carries a unique ID and is kept in a ledger, readers, a scaler for
// the Deployment the controllers reconcile, and informers. See TestSoak.

// Labels of the soak's ConfigMaps: soakIDLabel is the unique ID of the
// create that made the object, soakShardLabel what the informers select
// on (objects of the writers' logs have none, so no informer receives
// their ever larger values).
const (
	soakIDLabel    = "soak-id"
	soakShardLabel = "soak-shard"
	soakShards     = 10
	// soakLive is how many of its created objects a writer keeps: each
	// create beyond it deletes the oldest, so the namespace stays small
	// (LISTs and re-lists stay cheap) however long the soak runs.
	soakLive = 40
)

// soakOp is one write: a create (ID on the object's label), an update
// (ID appended to the writer's log ConfigMap under a resourceVersion
// precondition) or a delete (of the object made by the create ID).
type soakOp struct {
	Kind   string    `json:"kind"`
	ID     string    `json:"id"`
	Writer int       `json:"writer"`
	Name   string    `json:"name,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	// Err is empty for a write the apiserver confirmed; otherwise the
	// write is indeterminate: it may have been applied once, never twice.
	Err string `json:"err,omitempty"`
}

// soakLedger is the history of every write, in the order they began.
type soakLedger struct {
	mu  sync.Mutex
	ops []soakOp
}

func (l *soakLedger) begin(op soakOp) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	op.Start = time.Now()
	l.ops = append(l.ops, op)
	return len(l.ops) - 1
}

func (l *soakLedger) end(i int, name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops[i].End = time.Now()
	if name != "" {
		l.ops[i].Name = name
	}
	if err != nil {
		l.ops[i].Err = err.Error()
	}
}

func (l *soakLedger) snapshot() []soakOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// soakBreak, set from FANOUT_SOAK_BREAK=replay, makes writer 0 replay its
// every 20th create and update as a broken proxy would (the update applied
// a second time, past its precondition): the break check of
// docs/resilience.md (Soak), which must see the duplicate check fail.
var soakBreak = os.Getenv("FANOUT_SOAK_BREAK") == "replay"

// soakWriter creates, updates and deletes ConfigMaps in ns through client
// every interval until ctx ends, recording each write in the ledger.
func soakWriter(ctx context.Context, client kubernetes.Interface, ns string, w int, interval time.Duration, l *soakLedger) {
	cms := client.CoreV1().ConfigMaps(ns)
	logName := fmt.Sprintf("soak-log-%d", w)
	var logCM *corev1.ConfigMap
	var live [][2]string // name and ID of each confirmed create, oldest first
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		id := fmt.Sprintf("w%d-c%d", w, seq)
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: fmt.Sprintf("soak-w%d-", w),
				Labels:       map[string]string{soakIDLabel: id, soakShardLabel: fmt.Sprint(seq % soakShards)},
			},
			Data: map[string]string{"id": id},
		}
		i := l.begin(soakOp{Kind: "create", ID: id, Writer: w})
		got, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err == nil && soakBreak && w == 0 && seq%20 == 0 {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		name := ""
		if err == nil {
			name = got.Name
			live = append(live, [2]string{name, id})
		}
		l.end(i, name, err)

		if logCM == nil {
			if logCM, err = cms.Get(ctx, logName, metav1.GetOptions{}); err != nil {
				logCM = nil
			}
		}
		if logCM != nil {
			id := fmt.Sprintf("w%d-u%d", w, seq)
			next := logCM.DeepCopy()
			if next.Data == nil {
				next.Data = map[string]string{}
			}
			next.Data["log"] += " " + id
			i := l.begin(soakOp{Kind: "update", ID: id, Writer: w, Name: logName})
			// next carries logCM's resourceVersion: the update applies
			// only over exactly what this writer last saw, so a replay
			// of an applied update conflicts instead of appending again.
			upd, err := cms.Update(ctx, next, metav1.UpdateOptions{})
			if err == nil && soakBreak && w == 0 && seq%20 == 0 {
				upd.Data["log"] += " " + id
				upd, err = cms.Update(ctx, upd, metav1.UpdateOptions{})
			}
			l.end(i, "", err)
			logCM = upd
			if err != nil {
				logCM = nil
			}
		}

		if len(live) > soakLive {
			old := live[0]
			live = live[1:]
			i := l.begin(soakOp{Kind: "delete", ID: old[1], Writer: w, Name: old[0]})
			l.end(i, "", cms.Delete(ctx, old[0], metav1.DeleteOptions{}))
		}
	}
}

// soakWriteCheck is what reading every soak object back found.
type soakWriteCheck struct {
	Writes        int      `json:"writes"`
	Confirmed     int      `json:"confirmed"`
	Indeterminate int      `json:"indeterminate"`
	Lost          []string `json:"lost,omitempty"`
	Duplicated    []string `json:"duplicated,omitempty"`
	Unknown       []string `json:"unknown,omitempty"`
	Objects       int      `json:"objects"`
}

func (c soakWriteCheck) ok() bool {
	return len(c.Lost) == 0 && len(c.Duplicated) == 0 && len(c.Unknown) == 0
}

// checkWrites compares the ledger with what the apiservers hold: objs, every
// ConfigMap in the namespace, listed (a quorum read) after asOf. A write
// confirmed before asOf must show: a create as exactly one object with its
// ID (none if its object's delete was confirmed), an update as its ID once
// in the writer's log, a delete as its object gone. A write that failed or
// was still running may show once or not at all; nothing may show twice.
func checkWrites(ops []soakOp, objs []corev1.ConfigMap, asOf time.Time) soakWriteCheck {
	var c soakWriteCheck
	byID := map[string][]string{}
	idOf := map[string]string{} // object name -> its ID label
	logs := map[string]map[string]int{}
	for _, o := range objs {
		idOf[o.Name] = o.Labels[soakIDLabel]
		if id, ok := o.Labels[soakIDLabel]; ok {
			byID[id] = append(byID[id], o.Name)
		}
		if strings.HasPrefix(o.Name, "soak-log-") {
			seen := map[string]int{}
			for _, id := range strings.Fields(o.Data["log"]) {
				seen[id]++
			}
			logs[o.Name] = seen
		}
	}
	known := map[string]bool{}
	// A delete carries the ID of the create that made its object: names
	// alone do not tell objects apart, since generateName may give a new
	// object the name of a deleted one (it did, 2,600 creates into a run).
	deleted := map[string]soakOp{} // create ID -> the delete of its object
	for _, op := range ops {
		if op.Kind == "delete" {
			deleted[op.ID] = op
		}
	}
	settled := func(op soakOp) bool { return !op.End.IsZero() && op.End.Before(asOf) }
	for _, op := range ops {
		c.Writes++
		switch {
		case !settled(op) || op.Err != "":
			c.Indeterminate++
		default:
			c.Confirmed++
		}
		switch op.Kind {
		case "create":
			known[op.ID] = true
			names := byID[op.ID]
			switch {
			case len(names) > 1:
				c.Duplicated = append(c.Duplicated, fmt.Sprintf("create %s: %d objects %v", op.ID, len(names), names))
			case len(names) == 1 && op.Name != "" && names[0] != op.Name:
				// The object the create answered with was deleted; a
				// second one made by a replay remains.
				c.Duplicated = append(c.Duplicated, fmt.Sprintf("create %s: object %s, but the create made %s", op.ID, names[0], op.Name))
			}
			del, hasDel := deleted[op.ID]
			if settled(op) && op.Err == "" && len(names) == 0 && !hasDel {
				c.Lost = append(c.Lost, fmt.Sprintf("create %s (%s): no object", op.ID, op.Name))
			}
			if hasDel && settled(del) && del.Err == "" && idOf[op.Name] == op.ID {
				c.Lost = append(c.Lost, fmt.Sprintf("delete of %s (%s): object still there", op.Name, op.ID))
			}
		case "update":
			n := logs[op.Name][op.ID]
			if n > 1 {
				c.Duplicated = append(c.Duplicated, fmt.Sprintf("update %s: %d times in %s", op.ID, n, op.Name))
			}
			if n == 0 && settled(op) && op.Err == "" {
				c.Lost = append(c.Lost, fmt.Sprintf("update %s: not in %s", op.ID, op.Name))
			}
		}
	}
	for id := range byID {
		if !known[id] {
			c.Unknown = append(c.Unknown, id)
		}
	}
	c.Objects = len(objs)
	slices.Sort(c.Unknown)
	return c
}

// soakReads is the reader's record: how many reads, and each failure with
// its time, for the attribution to fault windows.
type soakReads struct {
	mu       sync.Mutex
	total    int
	failures []soakFailure
}

type soakFailure struct {
	Kind  string    `json:"kind"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Err   string    `json:"err"`
	// Fault is the index of the fault window the failure falls in, or -1.
	Fault int `json:"fault"`
}

func (r *soakReads) record(kind string, start time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if err != nil {
		r.failures = append(r.failures, soakFailure{Kind: kind, Start: start, End: time.Now(), Err: err.Error(), Fault: -1})
	}
}

func (r *soakReads) snapshot() (int, []soakFailure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total, slices.Clone(r.failures)
}

// soakReader GETs a writer's log and LISTs one shard of the objects,
// alternately, every interval until ctx ends. A read that the context's
// end cut short is not a failure.
func soakReader(ctx context.Context, client kubernetes.Interface, ns string, writers int, interval time.Duration, rng *rand.Rand, r *soakReads) {
	cms := client.CoreV1().ConfigMaps(ns)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		start := time.Now()
		var err error
		kind := "get"
		if i%2 == 0 {
			_, err = cms.Get(ctx, fmt.Sprintf("soak-log-%d", rng.IntN(writers)), metav1.GetOptions{})
		} else {
			kind = "list"
			_, err = cms.List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%d", soakShardLabel, rng.IntN(soakShards))})
		}
		if ctx.Err() != nil {
			return
		}
		r.record(kind, start, err)
	}
}

// soakScaler scales the Deployment between lo and hi replicas every
// interval until ctx ends, for the in-pod kube-controller-manager and
// kube-scheduler to reconcile. A failed scale is retried at the next turn.
func soakScaler(ctx context.Context, logf func(string, ...any), client kubernetes.Interface, ns, name string, lo, hi int32, interval time.Duration) {
	deps := client.AppsV1().Deployments(ns)
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		n := lo
		if i%2 == 1 {
			n = hi
		}
		s, err := deps.GetScale(ctx, name, metav1.GetOptions{})
		if err == nil {
			s.Spec.Replicas = n
			_, err = deps.UpdateScale(ctx, name, s, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			logf("scaling %s to %d: %v", name, n, err)
		}
	}
}

// startSoakInformers starts n informers through client: every fifth on
// the namespace's Pods (which change as the Deployment scales), the
// others on one shard of the ConfigMaps each. It waits for them to sync.
func startSoakInformers(ctx context.Context, client kubernetes.Interface, ns string, n int, l *harness.Lists) error {
	var synced []cache.InformerSynced
	for i := range n {
		var inf cache.SharedIndexInformer
		var err error
		if i%5 == 4 {
			pods := client.CoreV1().Pods(ns)
			inf, err = harness.CountedInformer(l, &corev1.Pod{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }, pods.Watch)
		} else {
			cms := client.CoreV1().ConfigMaps(ns)
			sel := fmt.Sprintf("%s=%d", soakShardLabel, i%soakShards)
			inf, err = harness.CountedInformer(l, &corev1.ConfigMap{},
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					o.LabelSelector = sel
					return cms.List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					o.LabelSelector = sel
					return cms.Watch(ctx, o)
				})
		}
		if err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	syncCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		return fmt.Errorf("%d informers did not sync within 3 minutes", n)
	}
	return nil
}

// soakLogConfigMaps creates each writer's log ConfigMap.
func soakLogConfigMaps(ctx context.Context, client kubernetes.Interface, ns string, writers int) error {
	for w := range writers {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("soak-log-%d", w)}, Data: map[string]string{"log": ""}}
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
