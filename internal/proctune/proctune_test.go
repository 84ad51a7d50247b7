package proctune

import (
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNext(t *testing.T) {
	for _, c := range []struct {
		name        string
		cur         int
		r           Reading
		quiet       int
		want, wantQ int
	}{
		{"one P, light", 1, Reading{CPU: 0.3, Waited: 0.01}, 0, 1, 0},
		{"one P, busy", 1, Reading{CPU: 0.85}, 0, 4, 0},
		{"one P, work waits for it", 1, Reading{CPU: 0.5, Waited: 0.2}, 0, 4, 0},
		{"many, busy", 4, Reading{CPU: 1.5}, 3, 4, 0},
		{"many, light but waiting", 4, Reading{CPU: 0.2, Waited: 0.02}, 3, 4, 0},
		{"many, between the thresholds", 4, Reading{CPU: 0.7}, 5, 4, 0},
		{"many, first quiet period", 4, Reading{CPU: 0.1}, 0, 4, 1},
		{"many, quiet long enough", 4, Reading{CPU: 0.1}, downAfter - 1, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, q := Next(c.cur, 4, c.r, c.quiet)
			if got != c.want || q != c.wantQ {
				t.Errorf("Next(%d, 4, %+v, %d) = %d, %d; want %d, %d", c.cur, c.r, c.quiet, got, q, c.want, c.wantQ)
			}
		})
	}
}

// TestTunerFollowsLoad steps the tuner on a fake CPU clock: a busy period
// moves it to max, downAfter quiet ones back to one.
func TestTunerFollowsLoad(t *testing.T) {
	var cpu time.Duration
	procs := 1
	set := func(n int) int {
		prev := procs
		if n > 0 {
			procs = n
		}
		return prev
	}
	tn := newTuner(3, set, func() time.Duration { return cpu })
	var waited float64
	tn.waits = func() float64 { return waited }
	at := tn.lastAt
	var next time.Duration // the period step asked for
	period := func(load float64) {
		at = at.Add(Period)
		cpu += time.Duration(load * float64(Period))
		next = tn.step(at)
	}
	// check wants GOMAXPROCS procs and, unless 0, the next period.
	check := func(want int, wantNext time.Duration, what string) {
		t.Helper()
		if procs != want {
			t.Fatalf("%s: GOMAXPROCS %d, want %d", what, procs, want)
		}
		if wantNext != 0 && next != wantNext {
			t.Errorf("%s: next period %v, want %v", what, next, wantNext)
		}
	}
	period(0.1)
	check(1, Period, "light load on one P")
	period(0.01)
	check(1, IdlePeriod, "idle on one P")
	period(0.95)
	check(3, Period, "busy")
	period(0.7)
	check(3, 0, "between the thresholds")
	for i := 0; i < downAfter-1; i++ {
		period(0.05)
	}
	check(3, Period, "quiet for one period less than downAfter")
	period(0.01)
	check(1, IdlePeriod, "quiet for downAfter periods, idle")
	waited = 0.1
	period(0.3)
	check(3, Period, "light, but goroutines wait for the one P")
	if one, max := tn.Changes(); one != 1 || max != 2 {
		t.Errorf("Changes() = %d to one, %d to max; want 1, 2", one, max)
	}
	want := `
# HELP fanout_gomaxprocs_changes_total Times --max-procs adaptive moved GOMAXPROCS: to one thread (quiet), or to the most (busy).
# TYPE fanout_gomaxprocs_changes_total counter
fanout_gomaxprocs_changes_total{to="max"} 2
fanout_gomaxprocs_changes_total{to="one"} 1
`
	if err := testutil.CollectAndCompare(tn.Collector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister((*Tuner)(nil).Collector())
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 2 {
		t.Errorf("without a tuner: %d series (%v), want both at 0", n, err)
	}
}

// TestStartTunesTheRuntime starts the real tuner: it sets one P at once
// and moves up when goroutines spin on the CPU.
func TestStartTunesTheRuntime(t *testing.T) {
	max := runtime.GOMAXPROCS(0)
	if max < 2 {
		t.Skip("GOMAXPROCS is 1: nothing to tune")
	}
	tn := Start(max)
	defer tn.Stop()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("after Start: GOMAXPROCS %d, want 1", got)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < max; i++ {
		spin(stop, &wg)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != max && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if got := runtime.GOMAXPROCS(0); got != max {
		t.Fatalf("busy for 10 s: GOMAXPROCS %d, want %d", got, max)
	}
	deadline = time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("quiet for 10 s: GOMAXPROCS %d, want 1", got)
	}
	tn.Stop()
	if got := runtime.GOMAXPROCS(0); got != max {
		t.Errorf("after Stop: GOMAXPROCS %d, want %d", got, max)
	}
}

// TestReadWaits reads the runtime's scheduling latencies while one P is
// kept busy by a goroutine that never blocks: goroutines coming back from
// a blocking system call need a P and wait for the scheduler to preempt
// it (about 10 ms), so many of their schedulings count as waiting long.
// (Goroutines woken by timers would not do: the busy P runs its timers
// only when it schedules, so they are made ready and run at once.)
func TestReadWaits(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	tn := newTuner(2, func(int) int { return 1 }, func() time.Duration { return 0 })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	spin(stop, &wg)
	// The runtime times one scheduling in eight, and readWaits ignores
	// fewer than minWaits: 64 goroutines over about 50 preemptions give
	// a few times that.
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.NsecToTimespec(int64(100 * time.Microsecond))
			for {
				select {
				case <-stop:
					return
				default:
				}
				syscall.Nanosleep(&ts, nil)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if w := tn.waits(); w < upWaited {
		t.Errorf("with the one P kept busy: waited %.3f of schedulings, want at least %.2f", w, upWaited)
	}
}

// spin starts a goroutine that keeps a P busy, never blocking, until stop
// is closed.
func spin(stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for j := 0; j < 1e5; j++ {
			}
		}
	}()
}
