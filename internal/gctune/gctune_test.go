package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		live, scan, headroom uint64
		floor, want          int
	}{
		{0, 0, 16 * mi, minPercent, 400},        // before the first collection: heapMinimum×4 = 16 MiB
		{2 * mi, 0, 16 * mi, minPercent, 425},   // headroom 16-1: goal max(2×5.25, 4×4.25) = 17 MiB
		{8 * mi, 0, 16 * mi, minPercent, 150},   // headroom 16-4: goal 8×2.5 = 20 MiB
		{12 * mi, 0, 16 * mi, minPercent, 83},   // headroom 16-6 = 10: goal 12 + 12×0.83
		{16 * mi, 0, 16 * mi, minPercent, 50},   // headroom down to half: goal 16 + 8 MiB
		{24 * mi, 0, 16 * mi, minPercent, 33},   // many watches: 24 + 8, not 48 MiB
		{20 * mi, 12 * mi, 16 * mi, 25, 25},     // stacks count: 20 + (20+12)×0.25 = 28 MiB
		{4 * mi, 12 * mi, 16 * mi, 25, 50},      // stacks shrink the headroom too: 4 + 16×0.5 = 12 MiB
		{64 * mi, 0, 16 * mi, minPercent, 25},   // a quarter of the live heap, more than half the headroom
		{256 * mi, 0, 16 * mi, minPercent, 25},  // never below the floor
		{64 * mi, 0, 16 * mi, 100, 100},         // an explicit GOGC=100 is the floor
		{1, 0, 1 << 40, minPercent, maxPercent}, // nor above maxPercent
	} {
		if got := Percent(c.live, c.scan, c.headroom, c.floor); got != c.want {
			t.Errorf("Percent(live %d, scan %d, headroom %d, floor %d) = %d, want %d", c.live, c.scan, c.headroom, c.floor, got, c.want)
		}
	}
}

var live [][]byte

// waitPercent waits for the tuner's cleanup, which runs on its own
// goroutine after a collection, to have set want.
func waitPercent(t *testing.T, tu *Tuner, want func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		p := tu.Percent()
		if want(p) || time.Now().After(deadline) {
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHeadroom(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct{ inUse, want uint64 }{
		{0, 16 * mi},
		{2 * mi, 15 * mi},      // short requests
		{15 * mi, 8*mi + mi/2}, // 2,000 watches
		{16 * mi, 8 * mi},      // half the headroom...
		{64 * mi, 8 * mi},      // ...at the least
		{1 << 40, 8 * mi},      // no wrap-around
	} {
		if got := Headroom(c.inUse, 16*mi); got != c.want {
			t.Errorf("Headroom(%d MiB in use, 16 MiB) = %.2f MiB, want %.2f", c.inUse/mi, float64(got)/mi, float64(c.want)/mi)
		}
	}
}

// checkHeadroom checks that the runtime's heap goal, with the GOGC the
// tuner set, is the live heap plus about want(live heap). It reads the goal
// rather than counting collections: how many run while garbage is made
// depends on how fast the machine marks, the goal does not.
func checkHeadroom(t *testing.T, what string, want func(live uint64) uint64) {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	live, goal := s[0].Value.Uint64(), s[1].Value.Uint64()
	headroom := want(live)
	const mi = 1 << 20
	t.Logf("%s: live heap %.1f MiB, heap goal %.1f MiB", what, float64(live)/mi, float64(goal)/mi)
	if goal < live+headroom*7/8 || goal > live+headroom*9/8 {
		t.Errorf("%s: heap goal %.1f MiB with %.1f MiB live, want live + %.1f MiB (±1/8)", what, float64(goal)/mi, float64(live)/mi, float64(headroom)/mi)
	}
}

func TestTunerLeavesHeadroomAndFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const headroom = 16 << 20

	tu := Start(headroom)
	if p := waitPercent(t, tu, func(p int) bool { return p >= 300 }); p < 300 {
		t.Fatalf("GOGC %d with a small live heap, want at least 300 (16 MiB of headroom)", p)
	}
	checkHeadroom(t, "small live heap", func(live uint64) uint64 { return headroom - live/2 })

	// 16 MiB live: half the headroom, so that GOGC is about 50 and the
	// heap grows by 8 MiB, not by the whole 16.
	live = make([][]byte, 16)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	if p := waitPercent(t, tu, func(p int) bool { return p <= 55 }); p > 55 {
		t.Errorf("GOGC %d with 16 MiB live, want about 50 (8 MiB of headroom)", p)
	}
	checkHeadroom(t, "16 MiB live", func(uint64) uint64 { return headroom / 2 })

	// 64 MiB live: the tuner lowers GOGC so that the heap grows by a
	// quarter of it, not by 64 MiB as GOGC=100 would let it.
	live = make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	// About 25: the tuner leaves GOGC alone for a change under a tenth, so
	// a collection that found 58 MiB live can leave 27 in place.
	if p := waitPercent(t, tu, func(p int) bool { return p <= 30 }); p > 30 {
		t.Errorf("GOGC %d with 64 MiB live, want about %d (a quarter of the live heap)", p, minPercent)
	}
	checkHeadroom(t, "64 MiB live", func(live uint64) uint64 { return live / 4 })
	live = nil
	if p := waitPercent(t, tu, func(p int) bool { return p >= 300 }); p < 300 {
		t.Errorf("GOGC %d after the live heap shrank again, want at least 300", p)
	}

	tu.Stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC %d after Stop, want the 100 in effect at Start", got)
	}
}

// TestExplicitGOGCIsTheFloor: an operator's GOGC is never undercut.
func TestExplicitGOGCIsTheFloor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "100")
	tu := Start(16 << 20)
	defer tu.Stop()
	live = make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	defer func() { live = nil }()
	// The tuner has run after these collections once it has left the
	// GOGC of 400 it set before the first one.
	if p := waitPercent(t, tu, func(p int) bool { return p < 400 }); p != 100 {
		t.Errorf("GOGC %d with 64 MiB live and GOGC=100 in the environment, want 100", p)
	}
}

func TestStartOff(t *testing.T) {
	if Start(0) != nil {
		t.Error("Start(0) tunes; 0 turns the tuner off")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if Start(16<<20) != nil {
		t.Error("Start tunes with GOGC=off")
	}
}
