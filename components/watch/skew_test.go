package watch

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
)

// TestRebalancerMovesOnlyToServingEndpoints: a holds 20 watches, half of
// an API that only a serves (version skew). The rebalancer ends watches
// of the other half to spread them, and never one that its destination
// does not serve.
func TestRebalancerMovesOnlyToServingEndpoints(t *testing.T) {
	alpha := balancer.API{Group: "storage.k8s.io", Version: "v1alpha1", Resource: "volumeattributesclasses"}
	synctest.Test(t, func(t *testing.T) {
		src := &fakeLoads{}
		serves := func(address string, api balancer.API) bool { return address == "a" || api != alpha }
		r, err := NewRebalancer(RebalanceConfig{Serves: serves}, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		since := map[string]time.Time{"a": start, "b": start, "c": start}
		open := map[string]int64{"a": 20}
		src.set(open, since)
		skewed := addStreams(r, "a", 10, start, time.Time{}, 0)
		plain := addStreams(r, "a", 10, start.Add(time.Hour), time.Time{}, 0) // younger: the skewed ones come first
		r.set.mu.Lock()
		for _, m := range r.set.byEnd {
			for w := range m {
				if w.opened.Before(start.Add(time.Hour)) {
					w.api = alpha
				}
			}
		}
		r.set.mu.Unlock()
		time.Sleep(2 * time.Hour)
		r.tick() // records b's and c's readiness, Margin later
		r.set.mu.Lock()
		for _, m := range r.set.byEnd {
			for w := range m {
				w.lastAt.Store(time.Now().Add(time.Second).UnixNano())
			}
		}
		r.set.mu.Unlock()
		ended := 0
		for range 20 {
			time.Sleep(time.Second)
			r.tick()
			now := closedCount(plain)
			rewatch(open, now-ended)
			ended = now
			src.set(open, since)
		}
		if n := closedCount(skewed); n != 0 {
			t.Errorf("ended %d watches of an API only a serves, want 0", n)
		}
		if ended == 0 {
			t.Error("ended no watch of an API every endpoint serves, want some")
		}
	})
}
