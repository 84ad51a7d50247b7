package watch

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFreshnessRequest(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{"plain watch", "/api/v1/namespaces/x/configmaps?watch=true&resourceVersion=5&allowWatchBookmarks=true&timeoutSeconds=300",
			"https://a:6443/api/v1/namespaces/x/configmaps?limit=1"},
		{"selectors kept", "/apis/apps/v1/deployments?watch=1&labelSelector=app%3Dx&fieldSelector=metadata.name%3Dd&resourceVersion=9",
			"https://a:6443/apis/apps/v1/deployments?fieldSelector=metadata.name%3Dd&labelSelector=app%3Dx&limit=1"},
		{"WatchList", "/api/v1/namespaces/x/secrets?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&limit=500",
			"https://a:6443/api/v1/namespaces/x/secrets?limit=1"},
		{"legacy path, a namespace named watch", "/api/v1/watch/namespaces/watch/configmaps?resourceVersion=5",
			"https://a:6443/api/v1/namespaces/watch/configmaps?limit=1"},
		{"not a watch", "/api/v1/namespaces/x/configmaps", ""},
	} {
		out := httptest.NewRequest(http.MethodGet, tt.in, nil)
		out.Header.Set("Authorization", "Bearer t")
		out.Header.Set("User-Agent", "ctrl/1.0")
		out.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
		out.Header.Set("Accept-Encoding", "gzip")
		req, ok := freshnessRequest(context.Background(), out.URL, out.Header, "a:6443")
		if ok != (tt.want != "") {
			t.Errorf("%s: made a request %v, want %v", tt.name, ok, tt.want != "")
			continue
		}
		if !ok {
			continue
		}
		if got := req.URL.String(); got != tt.want || req.Method != http.MethodGet {
			t.Errorf("%s: %s %s, want GET %s", tt.name, req.Method, got, tt.want)
		}
		for k, want := range map[string]string{"Authorization": "Bearer t", "User-Agent": "ctrl/1.0 fanout-watch-freshness",
			"Accept": "application/json", "Accept-Encoding": ""} {
			if got := req.Header.Get(k); got != want {
				t.Errorf("%s: %s %q, want %q", tt.name, k, got, want)
			}
		}
		if out.Header.Get("User-Agent") != "ctrl/1.0" || out.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("%s: the watch's own headers changed: %v", tt.name, out.Header)
		}
	}
}

// fakeSend records freshness requests and answers them with status.
type fakeSend struct {
	mu     sync.Mutex
	status int
	body   string   // "{}" when empty
	got    []string // endpoint + " " + URL
}

func (f *fakeSend) send(req *http.Request, endpoint string) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, endpoint+" "+req.URL.RequestURI())
	body := f.body
	if body == "" {
		body = "{}"
	}
	return &http.Response{StatusCode: f.status, Body: io.NopCloser(strings.NewReader(body))}, nil
}

func (f *fakeSend) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// TestRebalancerRequestsFreshness: 30 quiet watches (20 of configmaps, 9
// of secrets, a WatchList of pods) on a, none on b and c, which came
// back: they stay blocked as not caught up, and as soon as the targets'
// readiness is recorded the rebalancer sends one freshness request per
// resource, once, to a (none for the WatchList still streaming).
// Only a bookmark newer than the recorded resourceVersion then lets the
// watches move; a new readiness of a target asks again.
func TestRebalancerRequestsFreshness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newTestRebalancer(t, RebalanceConfig{Freshness: true})
		start := time.Now()
		cameBack := start.Add(time.Minute)
		since := map[string]time.Time{"b": cameBack, "c": cameBack}
		open := map[string]int64{"a": 30}
		src.set(open, since)
		rcs := addStreams(r, "a", 30, start, cameBack.Add(-time.Second), 100)
		r.maxRV.Store(100)
		// The source answers at resourceVersion 160: the etcd revision after
		// the targets' readiness.
		fs := &fakeSend{status: http.StatusOK, body: `{"kind":"ConfigMapList","metadata":{"resourceVersion":"160"},"items":[]}`}
		for i, w := range r.set.on("a") {
			w.send = fs.send
			switch {
			case i < 20:
				w.resource = "/configmaps"
				w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n1/configmaps?watch=true&resourceVersion=90", nil))
			case i < 29:
				w.resource = "/secrets"
				w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n2/secrets?watch=true&resourceVersion=90", nil))
			default:
				// The only pods watch is a WatchList still sending its initial
				// events: no resourceVersion to judge yet.
				w.resource = "/pods"
				w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=true&sendInitialEvents=true", nil))
				w.initialDone.Store(false)
			}
		}

		time.Sleep(time.Until(cameBack))
		r.tick()
		r.wg.Wait() // the requests' goroutines
		if got := fs.requests(); len(got) != 0 {
			t.Fatalf("freshness requests before the targets' resourceVersion was recorded: %v", got)
		}
		// The resourceVersion to beat is recorded a Margin after the
		// readiness; the requests go in that tick, not a bookmark period later.
		marginTicks(r, 1)
		if got := fs.requests(); len(got) != 2 {
			t.Fatalf("freshness requests a Margin after the targets' readiness: %v, want 2", got)
		}
		marginTicks(r, 3)
		want := []string{"a /api/v1/namespaces/n1/configmaps?limit=1", "a /api/v1/namespaces/n2/secrets?limit=1"}
		got := fs.requests()
		slices.Sort(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("freshness requests after 5 ticks = %v, want %v (one per resource, once, none for the WatchList)", got, want)
		}
		if got := testutil.ToFloat64(r.freshness.WithLabelValues(freshOK)); got != 2 {
			t.Errorf("fanout_watch_freshness_requests_total{result=ok} = %v, want 2", got)
		}
		if n := closedCount(rcs); n != 0 {
			t.Fatalf("ended %d watches on a freshness request alone, want 0: only a newer bookmark proves rule 3", n)
		}
		if got := testutil.ToFloat64(r.blocked.WithLabelValues(blockedNotCaughtUp)); got == 0 {
			t.Errorf("blocked not_caught_up = 0 before any bookmark")
		}

		// Bookmarks newer than what fanout had seen (100) but older than the
		// answer (160) do not prove the targets' caches hold them.
		bookmark := func(rv uint64) {
			for _, w := range r.set.on("a") {
				w.lastAt.Store(time.Now().UnixNano())
				w.lastRV.Store(rv)
			}
			time.Sleep(time.Second)
			r.tick()
		}
		bookmark(150)
		if n := closedCount(rcs); n != 0 {
			t.Fatalf("ended %d watches at resourceVersion 150, below the freshness answer's 160", n)
		}
		bookmark(160)
		if n := closedCount(rcs); n == 0 {
			t.Fatalf("no watch ended after bookmarks at the freshness answer's resourceVersion")
		}

		// c comes back once more: a new epoch asks again, once recorded.
		since["c"] = time.Now()
		src.set(open, since)
		marginTicks(r, 3)
		if got := fs.requests(); len(got) != 4 {
			t.Errorf("freshness requests after c's new readiness: %v, want 2 more", got)
		}
	})
}

// quietOnA starts a freshness rebalancer whose n watches are all on a,
// opened an hour before b and c came back ready (now), quiet for the last
// second at resourceVersion 100, the highest seen.
func quietOnA(t *testing.T, n int) (*Rebalancer, []*chunkReader) {
	t.Helper()
	r, src := newTestRebalancer(t, RebalanceConfig{Freshness: true})
	cameBack := time.Now()
	src.set(map[string]int64{"a": int64(n)}, map[string]time.Time{"b": cameBack, "c": cameBack})
	rcs := addStreams(r, "a", n, cameBack.Add(-time.Hour), cameBack.Add(-time.Second), 100)
	r.maxRV.Store(100)
	return r, rcs
}

// TestFreshnessRejected: an answer other than 200 is counted as rejected
// and not asked again in the same epoch.
func TestFreshnessRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := quietOnA(t, 10)
		fs := &fakeSend{status: http.StatusForbidden}
		for _, w := range r.set.on("a") {
			w.send, w.resource = fs.send, "/configmaps"
			w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n1/configmaps?watch=true", nil))
		}
		marginTicks(r, 4)
		if got := testutil.ToFloat64(r.freshness.WithLabelValues(freshRejected)); got != 1 {
			t.Errorf("fanout_watch_freshness_requests_total{result=rejected} = %v, want 1", got)
		}
		problems, err := testutil.CollectAndLint(r.freshness)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	})
}

// TestFreshnessFromEveryOverloadedEndpoint: after c comes back, a and b
// both hold more than their share of quiet watches; both get their
// freshness request in the same tick, not one bookmark period apart.
func TestFreshnessFromEveryOverloadedEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newTestRebalancer(t, RebalanceConfig{Freshness: true})
		cameBack := time.Now()
		src.set(map[string]int64{"a": 15, "b": 15}, map[string]time.Time{"c": cameBack})
		fs := &fakeSend{status: http.StatusOK}
		for _, ep := range []string{"a", "b"} {
			addStreams(r, ep, 15, cameBack.Add(-time.Hour), cameBack.Add(-time.Second), 100)
			for _, w := range r.set.on(ep) {
				w.send, w.resource = fs.send, "/configmaps"
				w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n1/configmaps?watch=true", nil))
			}
		}
		r.maxRV.Store(100)
		marginTicks(r, 1)
		got := fs.requests()
		slices.Sort(got)
		if want := "a /api/v1/namespaces/n1/configmaps?limit=1,b /api/v1/namespaces/n1/configmaps?limit=1"; strings.Join(got, ",") != want {
			t.Errorf("freshness requests %v, want one to each of a and b", got)
		}
	})
}

// marginTicks lets n Margins pass, the rebalancer ticking after each,
// and waits for the freshness requests the ticks sent.
func marginTicks(r *Rebalancer, n int) {
	for range n {
		time.Sleep(DefaultRebalanceMargin)
		r.tick()
	}
	r.wg.Wait()
}

// setRequest sets the request w was sent as, as track does.
func (w *watchStream) setRequest(out *http.Request) { w.url, w.header = out.URL, out.Header }

// TestFreshnessOnReadinessWhenBalanced: c became ready again and already
// holds its share; nothing is to be moved, but the quiet watches on a and
// b hold resourceVersions older than c's watch cache, so if a or b went
// (the next step of a roll) their clients would re-watch on c, get a 410
// and re-list. Each of a and b gets one freshness request per resource as
// soon as c's readiness is recorded; c's own watches, newer than a's and
// b's readiness, get none, and no watch is ended.
func TestFreshnessOnReadinessWhenBalanced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newTestRebalancer(t, RebalanceConfig{Freshness: true})
		start := time.Now()
		cameBack := start.Add(time.Hour)
		since := map[string]time.Time{"a": start, "b": start, "c": cameBack}
		src.set(map[string]int64{"a": 10, "b": 10, "c": 10}, since)
		r.maxRV.Store(100)
		time.Sleep(DefaultRebalanceMargin)
		r.tick() // a's and b's readiness recorded at resourceVersion 100
		time.Sleep(time.Until(cameBack))
		fs := &fakeSend{status: http.StatusOK}
		var rcs []*chunkReader
		for ep, res := range map[string]string{"a": "configmaps", "b": "secrets", "c": "leases"} {
			opened, lastAt, rv := start.Add(time.Minute), start.Add(2*time.Minute), uint64(90)
			if ep == "c" {
				opened, lastAt, rv = cameBack.Add(time.Second), cameBack.Add(2*time.Second), 120
			}
			rcs = append(rcs, addStreams(r, ep, 10, opened, lastAt, rv)...)
			for _, w := range r.set.on(ep) {
				w.send, w.resource = fs.send, "/"+res
				w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/"+res+"?watch=true", nil))
			}
		}
		r.maxRV.Store(120)
		r.tick()
		r.wg.Wait()
		if got := fs.requests(); len(got) != 0 {
			t.Fatalf("freshness requests before c's readiness was recorded: %v", got)
		}
		marginTicks(r, 3)
		got := fs.requests()
		slices.Sort(got)
		if want := "a /api/v1/configmaps?limit=1,b /api/v1/secrets?limit=1"; strings.Join(got, ",") != want {
			t.Errorf("freshness requests %v, want %s", got, want)
		}
		if n := closedCount(rcs); n != 0 {
			t.Errorf("ended %d watches with the loads balanced", n)
		}
	})
}

// TestFreshnessFloorIsTheLowestAnswer: the freshness answers for two quiet
// resources came at resourceVersions 160 and 170. A configmaps watch whose
// bookmark reached 165, past its own answer, is caught up: every answer
// came after the targets' readiness, so the lowest already bounds their
// caches' start. Held to the highest, it would wait for etcd's next
// progress notification, minutes away.
func TestFreshnessFloorIsTheLowestAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, rcs := quietOnA(t, 20)
		send := func(req *http.Request, _ string) (*http.Response, error) {
			rv := "170"
			if strings.Contains(req.URL.Path, "configmaps") {
				rv = "160"
			}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(`{"metadata":{"resourceVersion":"` + rv + `"}}`))}, nil
		}
		var cms []*watchStream
		for i, w := range r.set.on("a") {
			w.send = send
			res := "secrets"
			if i%2 == 0 {
				res = "configmaps"
				cms = append(cms, w)
			}
			w.resource = "/" + res
			w.setRequest(httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n1/"+res+"?watch=true", nil))
		}
		marginTicks(r, 1)
		if got := testutil.ToFloat64(r.freshness.WithLabelValues(freshOK)); got != 2 {
			t.Fatalf("freshness requests answered: %v, want 2", got)
		}
		time.Sleep(time.Second)
		for _, w := range cms {
			w.lastAt.Store(time.Now().UnixNano())
			w.lastRV.Store(165)
		}
		time.Sleep(time.Second)
		r.tick()
		if n := closedCount(rcs); n == 0 {
			t.Fatalf("no configmaps watch ended at resourceVersion 165, past its own answer (160): the floor must be the lowest answer, not %d", r.ready["b"].floor.Load())
		}
	})
}
