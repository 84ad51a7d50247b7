package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{0, 16 * mi, 100, 400},       // before the first collection: heapMinimum×4 = 16 MiB
		{2 * mi, 16 * mi, 100, 450},  // goal max(2×5.5, 4×4.5) = 18 MiB = live + headroom
		{8 * mi, 16 * mi, 100, 200},  // goal 8×3 = 24 MiB
		{16 * mi, 16 * mi, 100, 100}, // GOGC alone gives the headroom
		{64 * mi, 16 * mi, 100, 100}, // never below GOGC
		{64 * mi, 16 * mi, 150, 150},
		{1, 1 << 40, 100, maxPercent},
	} {
		if got := Percent(c.live, c.headroom, c.base); got != c.want {
			t.Errorf("Percent(live %d, headroom %d, base %d) = %d, want %d", c.live, c.headroom, c.base, got, c.want)
		}
	}
}

var sink []byte
var live [][]byte

// collections counts the collections while 256 MiB of short-lived garbage
// is allocated beside a small live heap.
func collections() uint32 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 256<<10; i++ {
		sink = make([]byte, 1<<10)
	}
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

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

func TestTunerLeavesHeadroomAndFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	untuned := collections()

	tu := Start(16 << 20)
	if p := waitPercent(t, tu, func(p int) bool { return p >= 300 }); p < 300 {
		t.Fatalf("GOGC %d with a small live heap, want at least 300 (16 MiB of headroom)", p)
	}
	tuned := collections()
	t.Logf("collections for 256 MiB of garbage: %d untuned, %d with 16 MiB of headroom", untuned, tuned)
	if tuned*3 > untuned {
		t.Errorf("%d collections with the tuner, %d without: want at most a third", tuned, untuned)
	}

	// 64 MiB live: GOGC=100 alone leaves 64 MiB, so the tuner steps back.
	live = make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	if p := waitPercent(t, tu, func(p int) bool { return p == 100 }); p != 100 {
		t.Errorf("GOGC %d with 64 MiB live, want 100", p)
	}
	live = nil
	if p := waitPercent(t, tu, func(p int) bool { return p >= 300 }); p < 300 {
		t.Errorf("GOGC %d after the live heap shrank again, want at least 300", p)
	}

	tu.Stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC %d after Stop, want the 100 in effect at Start", got)
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
