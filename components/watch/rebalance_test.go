package watch

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

func TestEligible(t *testing.T) {
	now := time.Unix(10_000, 0)
	ready := now.Add(-time.Minute)
	caughtUp := &readiness{since: ready, recorded: true, rv: 500}
	noRVs := &readiness{since: ready, recorded: true}
	fresh := &readiness{since: now.Add(-2 * time.Second)} // not recorded yet
	floored := func(rv uint64) *readiness {
		t := &readiness{since: ready, recorded: true, rv: 500}
		t.floor.Store(rv)
		return t
	}
	good := watchView{opened: now.Add(-time.Hour), lastAt: now.Add(-time.Second), lastRV: 501, initialDone: true}
	for _, tt := range []struct {
		name    string
		w       watchView
		targets []*readiness
		want    string
	}{
		{"ok", good, []*readiness{caughtUp, caughtUp}, ""},
		{"initial events streaming", watchView{opened: good.opened, lastAt: good.lastAt, lastRV: 501}, []*readiness{caughtUp}, blockedInitialEvents},
		{"too young", watchView{opened: now.Add(-9 * time.Second), lastAt: good.lastAt, lastRV: 501, initialDone: true}, []*readiness{caughtUp}, blockedTooYoung},
		{"just old enough", watchView{opened: now.Add(-10 * time.Second), lastAt: good.lastAt, lastRV: 501, initialDone: true}, []*readiness{caughtUp}, ""},
		{"no event yet", watchView{opened: good.opened, initialDone: true}, []*readiness{noRVs}, blockedNotCaughtUp},
		{"last event before the target's ready time plus margin", watchView{opened: good.opened, lastAt: ready.Add(4 * time.Second), lastRV: 900, initialDone: true}, []*readiness{caughtUp}, blockedNotCaughtUp},
		{"last event after it", watchView{opened: good.opened, lastAt: ready.Add(5 * time.Second), lastRV: 900, initialDone: true}, []*readiness{caughtUp}, ""},
		{"resourceVersion not newer than the target's", watchView{opened: good.opened, lastAt: good.lastAt, lastRV: 500, initialDone: true}, []*readiness{caughtUp}, blockedNotCaughtUp},
		{"unknown resourceVersion once fanout has seen some", watchView{opened: good.opened, lastAt: good.lastAt, initialDone: true}, []*readiness{caughtUp}, blockedNotCaughtUp},
		{"no resourceVersion seen at all: time rule alone", watchView{opened: good.opened, lastAt: good.lastAt, initialDone: true}, []*readiness{noRVs}, ""},
		{"one target not caught up", good, []*readiness{caughtUp, fresh}, blockedNotCaughtUp},
		{"target never seen usable", good, []*readiness{nil}, blockedNotCaughtUp},
		{"below a freshness answer", good, []*readiness{floored(502)}, blockedNotCaughtUp},
		{"at a freshness answer", good, []*readiness{floored(501)}, ""},
	} {
		if got := eligible(tt.w, tt.targets, now, DefaultRebalanceMinAge, DefaultRebalanceMargin); got != tt.want {
			t.Errorf("%s: eligible = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// fakeLoads is a LoadSource the test sets.
type fakeLoads struct {
	mu    sync.Mutex
	loads []balancer.WatchLoad
	calls int // WatchLoads calls: one per rebalancer tick
}

func (f *fakeLoads) WatchLoads() []balancer.WatchLoad {
	f.mu.Lock()
	f.calls++
	defer f.mu.Unlock()
	return append([]balancer.WatchLoad(nil), f.loads...)
}

func (f *fakeLoads) set(open map[string]int64, since map[string]time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads = f.loads[:0]
	for _, a := range []string{"a", "b", "c"} {
		f.loads = append(f.loads, balancer.WatchLoad{Address: a, Usable: true, UsableSince: since[a], OpenLong: open[a]})
	}
}

// addStreams registers n idle watches on endpoint, opened at opened, whose
// last event came at lastAt with resourceVersion rv.
func addStreams(r *Rebalancer, endpoint string, n int, opened, lastAt time.Time, rv uint64) []*chunkReader {
	var out []*chunkReader
	for i := range n {
		rc := &chunkReader{}
		w := &watchStream{rc: rc, sc: newScanner(framingJSON, false), framing: framingJSON, endpoint: endpoint,
			opened: opened.Add(time.Duration(i) * time.Millisecond), set: &r.set, maxRV: &r.maxRV}
		w.initialDone.Store(true)
		if !lastAt.IsZero() {
			w.lastAt.Store(lastAt.UnixNano())
		}
		w.lastRV.Store(rv)
		r.set.add(w)
		out = append(out, rc)
	}
	return out
}

// rewatch moves n watches ended on a to the lighter of b and c, as the
// balancer sends their clients' new watches.
func rewatch(open map[string]int64, n int) {
	for range n {
		open["a"]--
		if open["b"] <= open["c"] {
			open["b"]++
		} else {
			open["c"]++
		}
	}
}

// newTestRebalancer is a Rebalancer of cfg over loads the test sets,
// stopped when the test ends.
func newTestRebalancer(t *testing.T, cfg RebalanceConfig) (*Rebalancer, *fakeLoads) {
	t.Helper()
	src := &fakeLoads{}
	r, err := NewRebalancer(cfg, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r, src
}

func closedCount(rcs []*chunkReader) int {
	n := 0
	for _, rc := range rcs {
		if rc.closed.Load() {
			n++
		}
	}
	return n
}

// TestRebalancerMovesAtRate: 30 watches on a, none on b and c, which came
// back a minute ago. With 2 watches a second and a burst of 2, the
// rebalancer ends 2 per tick, oldest first, and stops once the gap is
// within tolerance; it ends none before c has been ready for the margin.
func TestRebalancerMovesAtRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newTestRebalancer(t, RebalanceConfig{})
		start := time.Now()
		cameBack := start.Add(time.Minute)
		since := map[string]time.Time{"b": cameBack, "c": cameBack}
		open := map[string]int64{"a": 30}
		src.set(open, since)
		rcs := addStreams(r, "a", 30, start, cameBack.Add(-time.Second), 100)
		r.maxRV.Store(100)

		time.Sleep(time.Until(cameBack))
		r.tick()
		if n := closedCount(rcs); n != 0 {
			t.Fatalf("ended %d watches whose last event predates the other endpoints' readiness, want 0", n)
		}
		if got := testutil.ToFloat64(r.blocked.WithLabelValues(blockedNotCaughtUp)); got != 30 {
			t.Errorf("fanout_watch_rebalance_blocked{reason=not_caught_up} = %v, want 30", got)
		}
		// Margin later the rebalancer records resourceVersion 100 for b and c;
		// the watches then pass on events with newer ones.
		time.Sleep(DefaultRebalanceMargin)
		r.tick()
		for _, rc := range rcs {
			_ = rc
		}
		r.set.mu.Lock()
		for _, m := range r.set.byEnd {
			for w := range m {
				w.lastAt.Store(time.Now().Add(time.Second).UnixNano())
				w.lastRV.Store(150)
			}
		}
		r.set.mu.Unlock()
		if n := closedCount(rcs); n != 0 {
			t.Fatalf("ended %d watches before any passed on an event newer than the readiness, want 0", n)
		}

		ended := 0
		for tick := 1; tick <= 30; tick++ {
			time.Sleep(time.Second)
			r.tick()
			now := closedCount(rcs)
			if now-ended > 2 {
				t.Fatalf("tick %d ended %d watches, want at most 2 (rate 2/s)", tick, now-ended)
			}
			// The balancer sees them gone and the clients back on the lightest.
			rewatch(open, now-ended)
			ended = now
			src.set(open, since)
		}
		if open["a"]-min(open["b"], open["c"]) > 1 {
			t.Errorf("after 30 s the loads are %v, want within 1", open)
		}
		if ended != 20 {
			t.Errorf("ended %d watches in all, want 20 (30 over 3 endpoints)", ended)
		}
		// Oldest first: the first ended are the first opened.
		for i := range ended {
			if !rcs[i].closed.Load() {
				t.Errorf("watch %d (of the %d oldest) was not ended", i, ended)
			}
		}
		if got := testutil.ToFloat64(r.rebalanced.WithLabelValues("json")); got != 0 {
			// The streams here are never read, so none reached its EOF.
			t.Errorf("fanout_watch_rebalanced_total counted %v before any stream ended", got)
		}
	})
}

func TestRebalancerLeavesYoungAndInitialWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newTestRebalancer(t, RebalanceConfig{Rate: 100})
		src.set(map[string]int64{"a": 10}, nil)
		now := time.Now()
		young := addStreams(r, "a", 5, now.Add(-5*time.Second), now, 10)
		initial := addStreams(r, "a", 5, now.Add(-time.Hour), now, 10)
		for _, w := range r.set.on("a") {
			if w.opened.Before(now.Add(-time.Minute)) {
				w.initialDone.Store(false)
			}
		}
		r.tick()
		if n := closedCount(young) + closedCount(initial); n != 0 {
			t.Fatalf("ended %d watches that are too young or in their initial events", n)
		}
		if got := testutil.ToFloat64(r.blocked.WithLabelValues(blockedTooYoung)); got != 5 {
			t.Errorf("blocked too_young = %v, want 5", got)
		}
		if got := testutil.ToFloat64(r.blocked.WithLabelValues(blockedInitialEvents)); got != 5 {
			t.Errorf("blocked initial_events = %v, want 5", got)
		}
	})
}

func TestRebalancerToleratesSmallGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tt := range []struct {
			open    map[string]int64
			tol     float64
			wantEnd bool
		}{
			{map[string]int64{"a": 2, "b": 1, "c": 1}, 0, false},
			{map[string]int64{"a": 3, "b": 1, "c": 2}, 0, true},
			{map[string]int64{"a": 40, "b": 33, "c": 27}, 0.5, false}, // gap 13 <= 0.5 × 33.3
			{map[string]int64{"a": 40, "b": 33, "c": 27}, 0.1, true},
		} {
			r, src := newTestRebalancer(t, RebalanceConfig{Tolerance: tt.tol})
			src.set(tt.open, nil)
			rcs := addStreams(r, "a", int(tt.open["a"]), time.Now().Add(-time.Hour), time.Now(), 10)
			r.tick()
			if got := closedCount(rcs) > 0; got != tt.wantEnd {
				t.Errorf("loads %v, tolerance %v: ended a watch %v, want %v", tt.open, tt.tol, got, tt.wantEnd)
			}
		}
	})
}

// TestTrackOnlyWatches: only watch responses in a framing fanout can cut
// are wrapped.
func TestTrackOnlyWatches(t *testing.T) {
	r, err := NewRebalancer(RebalanceConfig{}, &fakeLoads{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		url, ct string
		code    int
		want    bool
	}{
		{"/api/v1/namespaces/x/configmaps?watch=true", "application/json", 200, true},
		{"/api/v1/configmaps?watch=1&resourceVersion=5", "application/vnd.kubernetes.protobuf;stream=watch", 200, true},
		{"/api/v1/watch/namespaces/x/configmaps", "application/json", 200, true},
		{"/api/v1/namespaces/x/configmaps?watch=true", "application/cbor-seq", 200, false},
		{"/api/v1/namespaces/x/configmaps?watch=true", "application/json", 410, false},
		{"/api/v1/namespaces/x/configmaps", "application/json", 200, false},
		{"/api/v1/namespaces/x/pods/p/log?follow=true", "text/plain", 200, false},
		{"/api/v1/namespaces/x/services/s/proxy/?watch=true", "application/json", 200, false},
		{"/api/v1/namespaces/x/pods/p/exec?command=sh", "application/json", 200, false},
	} {
		req := httptest.NewRequest(http.MethodGet, tt.url, nil)
		resp := &http.Response{StatusCode: tt.code, Header: http.Header{"Content-Type": {tt.ct}}, Body: http.NoBody}
		info := reqinfo.New(req)
		body := r.track(req, resp, &info, "a", nil, nil)
		if _, got := body.(*watchStream); got != tt.want {
			t.Errorf("%s (%s, %d): tracked %v, want %v", tt.url, tt.ct, tt.code, got, tt.want)
		}
		_ = body.Close()
	}
	if n := r.set.count(); n != 0 {
		t.Errorf("%d streams still registered after Close", n)
	}
}

func TestRebalanceConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  RebalanceConfig
		want string
	}{
		{RebalanceConfig{}, ""},
		{RebalanceConfig{Rate: -1}, "--watch-rebalance-rate"},
		{RebalanceConfig{Tolerance: -0.1}, "--watch-rebalance-tolerance"},
		{RebalanceConfig{MinAge: -time.Second}, "durations"},
	} {
		err := tt.cfg.Validate()
		if got := fmt.Sprint(err); (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(got, tt.want)) {
			t.Errorf("Validate(%+v) = %v, want mention of %q", tt.cfg, err, tt.want)
		}
	}
}

// TestRebalancerStartStop: Start ticks once per Interval, Stop ends the
// ticking (goleak checks the goroutine is gone). In a synctest bubble the
// clock is virtual, so the tick count is exact.
func TestRebalancerStartStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newTestRebalancer(t, RebalanceConfig{Interval: time.Second})
		ticks := func() int {
			synctest.Wait()
			src.mu.Lock()
			defer src.mu.Unlock()
			return src.calls
		}
		r.Start()
		time.Sleep(3*time.Second + time.Second/2)
		if n := ticks(); n != 3 {
			t.Errorf("%d ticks in 3.5 intervals, want 3", n)
		}
		r.Stop()
		time.Sleep(10 * time.Second)
		if n := ticks(); n != 3 {
			t.Errorf("%d ticks after Stop, want none more than 3", n)
		}
	})
}
