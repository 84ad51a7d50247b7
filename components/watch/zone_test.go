package watch

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestRebalancerFollowsZoneShares: under a zone policy the rebalancer
// aims at the balancer's shares (WatchLoad.Share), not at equal thirds.
// Watches within the preferred set at their shares stay; watches outside
// it move in; nothing moves towards an endpoint with no share.
func TestRebalancerFollowsZoneShares(t *testing.T) {
	for _, tt := range []struct {
		name  string
		open  map[string]int64
		share map[string]float64
		from  string // the endpoint whose watches are ended, "" for none
	}{
		// a,a,b with fanout in a: 15/15/0 is the target, equal thirds are not.
		{"at the policy's shares", map[string]int64{"a": 15, "b": 15, "c": 0}, map[string]float64{"a": .5, "b": .5}, ""},
		{"spill-over 3/4 to 1/4", map[string]int64{"a": 30, "b": 0, "c": 10}, map[string]float64{"a": .75, "c": .25}, ""},
		{"above its share within the set", map[string]int64{"a": 20, "b": 10, "c": 0}, map[string]float64{"a": .5, "b": .5}, "a"},
		{"outside the set", map[string]int64{"a": 12, "b": 12, "c": 6}, map[string]float64{"a": .5, "b": .5}, "c"},
		// Equal thirds as the balancer gives them (1/3 is inexact in
		// floating point): 7/7/6 is within 1 of the target.
		{"thirds, 7/7/6", map[string]int64{"a": 7, "b": 7, "c": 6}, map[string]float64{"a": oneThird, "b": oneThird, "c": oneThird}, ""},
		{"thirds, 2/1/1", map[string]int64{"a": 2, "b": 1, "c": 1}, map[string]float64{"a": oneThird, "b": oneThird, "c": oneThird}, ""},
		{"thirds, 1/0/0", map[string]int64{"a": 1}, map[string]float64{"a": oneThird, "b": oneThird, "c": oneThird}, ""},
		{"thirds, 2/2/1", map[string]int64{"a": 2, "b": 2, "c": 1}, map[string]float64{"a": oneThird, "b": oneThird, "c": oneThird}, ""},
		// No share anywhere: the balancer predates zones, equal thirds.
		{"no shares", map[string]int64{"a": 15, "b": 15, "c": 0}, nil, "ab"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, src := newTestRebalancer(t, RebalanceConfig{Rate: 100})
				src.set(tt.open, nil)
				for i := range src.loads {
					src.loads[i].Share = tt.share[src.loads[i].Address]
				}
				ended := map[string]int{}
				streams := map[string][]*chunkReader{}
				for _, a := range []string{"a", "b", "c"} {
					streams[a] = addStreams(r, a, int(tt.open[a]), time.Now().Add(-time.Hour), time.Now(), 10)
				}
				r.tick()
				for a, rcs := range streams {
					if n := closedCount(rcs); n > 0 {
						ended[a] = n
					}
				}
				if tt.from != "" && len(ended) == 0 {
					t.Errorf("loads %v at shares %v: ended none, want watches of %s", tt.open, tt.share, tt.from)
				}
				for a := range ended {
					if !strings.Contains(tt.from, a) {
						t.Errorf("loads %v at shares %v: ended %v, want watches of %s only", tt.open, tt.share, ended, tt.from)
					}
				}
			})
		})
	}
}

const oneThird = 1.0 / 3
