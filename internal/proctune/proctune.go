// Package proctune runs a process's Go code on one thread while one is
// enough, and on more when the process is busy.
//
// A sidecar serves one client, which is idle or sends a few requests a
// second most of the time. With more than one P the Go runtime hands each
// request between threads: a goroutine made ready wakes an idle thread,
// which spins looking for work, and a thread back from a slow syscall
// finds its P taken. At 1k requests a second one P took about a third
// less CPU than two (docs/footprint.md, "Threads for Go code"). But one P
// cannot take a burst of several thousand requests a second. So the tuner
// starts with one P and moves to the most it may use (the runtime's own
// choice at start) once the one P is busy, and back once the process has
// been quiet for a while.
//
// "Busy" is either of two readings over each period:
//   - the process's CPU time (user and system, every thread) was at least
//     upCPU of the period: the one P ran nearly all the time;
//   - at least upWaited of the goroutines made ready waited waitLong or
//     more for a P (the runtime's /sched/latencies:seconds): work queued
//     behind the one P, as when the node's CPUs are shared and the
//     process's thread gets less than a whole CPU.
//
// "Quiet" is CPU time under downCPU of the period and no more than
// downWaited of the goroutines waiting long, for downAfter periods in a
// row. The gap between the thresholds is wider than the CPU the extra Ps
// themselves cost, so that the tuner does not flap: under `make bench`'s
// 1k requests a second the process used 0.26-0.32 of a CPU with one P and
// 0.37-0.38 with two, so the load that makes one P busy (0.8) keeps two
// above downCPU, and a load that two serve under downCPU needs well under
// 0.8 on one.
package proctune

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	// Period is how often the tuner reads the CPU time and the scheduling
	// latencies: a burst runs on one P for at most about this long. At
	// 100 ms, 5k requests a second on a machine with no CPU to spare
	// queued up enough in the first period to stay behind.
	Period = 25 * time.Millisecond
	// IdlePeriod is the period while the process is on one P and used
	// under idleCPU in the last one: an idle sidecar then wakes 4 times a
	// second, not 40 (idle, 40 readings a second took 0.7 % of a CPU on
	// the benchmark's machine, about ten times the rest of the idle
	// process), and a burst that starts from idle runs on one P for at
	// most this long.
	IdlePeriod = 250 * time.Millisecond
	idleCPU    = 0.05

	upCPU      = 0.8
	upWaited   = 0.05
	downCPU    = 0.6
	downWaited = 0.01
	downAfter  = 40 // a second
	waitLong   = time.Millisecond
	// minWaits is the least number of timed schedulings in a period for
	// their waits to count: the runtime times one in eight, and a few at
	// start-up are not a load.
	minWaits = 20
)

// Reading is what the tuner measured over one period.
type Reading struct {
	// CPU is the process's CPU time over the period, as a fraction of the
	// period (1 = one CPU all the time).
	CPU float64
	// Waited is the fraction of the goroutines scheduled in the period
	// that waited waitLong or more for a P; 0 when fewer than minWaits
	// schedulings were timed.
	Waited float64
}

// Next returns the GOMAXPROCS for the next period: max when cur is 1 and
// the reading is busy; 1 when cur is above 1 and quiet has now counted
// downAfter quiet periods in a row; cur otherwise. quiet is the count of
// quiet periods before this one, and Next returns the updated count.
func Next(cur, max int, r Reading, quiet int) (procs, quietNow int) {
	if cur <= 1 {
		if r.CPU >= upCPU || r.Waited >= upWaited {
			return max, 0
		}
		return cur, 0
	}
	if r.CPU >= downCPU || r.Waited > downWaited {
		return cur, 0
	}
	quiet++
	if quiet >= downAfter {
		return 1, 0
	}
	return cur, quiet
}

// Tuner moves GOMAXPROCS between 1 and Max. Stop ends it and sets Max.
type Tuner struct {
	max  int
	stop chan struct{}
	done chan struct{}
	once sync.Once

	toOne, toMax atomic.Int64 // the moves, read by the collector

	// set is runtime.GOMAXPROCS, cpu the process's CPU time and waits
	// readWaits; tests replace them.
	set   func(int) int
	cpu   func() time.Duration
	waits func() float64

	sample  []metrics.Sample
	long    int // index of the first latency bucket at or above waitLong
	counts  []uint64
	lastCPU time.Duration
	lastAt  time.Time
	cur     int // GOMAXPROCS set last
	quiet   int // quiet periods in a row
}

// Start begins tuning between 1 and max Ps and returns the tuner, or nil
// when max is 1 (nothing to tune) or the system gives no process CPU time
// (not Unix: GOMAXPROCS stays as it is). It sets one P at once.
func Start(max int) *Tuner {
	if max <= 1 || !haveProcessCPU {
		return nil
	}
	t := newTuner(max, runtime.GOMAXPROCS, processCPU)
	t.set(1)
	go t.run()
	return t
}

func newTuner(max int, set func(int) int, cpu func() time.Duration) *Tuner {
	t := &Tuner{
		max:    max,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		set:    set,
		cpu:    cpu,
		sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}},
		long:   -1,
		cur:    1,
	}
	t.waits = t.readWaits
	t.lastCPU, t.lastAt = cpu(), time.Now()
	t.waits()
	return t
}

// Changes reports how many times the tuner moved to one P and to Max.
func (t *Tuner) Changes() (toOne, toMax int) {
	if t == nil {
		return 0, 0
	}
	return int(t.toOne.Load()), int(t.toMax.Load())
}

// Collector exports the changes as fanout_gomaxprocs_changes_total{to},
// to "one" or "max"; with a nil Tuner (not adaptive) both stay 0, so that
// the series exist whatever the setting. The value in effect is the Go
// collector's go_sched_gomaxprocs_threads.
func (t *Tuner) Collector() prometheus.Collector {
	return changesCollector{t}
}

var changesDesc = prometheus.NewDesc("fanout_gomaxprocs_changes_total",
	"Times --max-procs adaptive moved GOMAXPROCS: to one thread (quiet), or to the most (busy).",
	[]string{"to"}, nil)

type changesCollector struct{ t *Tuner }

func (c changesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- changesDesc }

func (c changesCollector) Collect(ch chan<- prometheus.Metric) {
	one, max := c.t.Changes()
	ch <- prometheus.MustNewConstMetric(changesDesc, prometheus.CounterValue, float64(one), "one")
	ch <- prometheus.MustNewConstMetric(changesDesc, prometheus.CounterValue, float64(max), "max")
}

// Stop ends the tuning and leaves Max Ps.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

func (t *Tuner) run() {
	defer close(t.done)
	timer := time.NewTimer(Period)
	defer timer.Stop()
	for {
		select {
		case <-t.stop:
			t.set(t.max)
			return
		case <-timer.C:
			timer.Reset(t.step(time.Now()))
		}
	}
}

// step reads the period that ended at, sets GOMAXPROCS for the next and
// returns how long the next period is.
func (t *Tuner) step(at time.Time) time.Duration {
	r := t.read(at)
	next, quiet := Next(t.cur, t.max, r, t.quiet)
	t.quiet = quiet
	period := Period
	if next == 1 && r.CPU < idleCPU {
		period = IdlePeriod
	}
	if next == t.cur {
		return period
	}
	t.set(next)
	t.cur = next
	if next == 1 {
		t.toOne.Add(1)
	} else {
		t.toMax.Add(1)
	}
	return period
}

// read returns the reading since the last one, at is now. The CPU time
// is divided by the time that really elapsed, which a late timer makes
// longer than the period.
func (t *Tuner) read(at time.Time) Reading {
	cpu := t.cpu()
	var r Reading
	if d := at.Sub(t.lastAt); d > 0 {
		r.CPU = float64(cpu-t.lastCPU) / float64(d)
	}
	t.lastCPU, t.lastAt = cpu, at
	r.Waited = t.waits()
	return r
}

// readWaits returns the fraction of schedulings since the last call that
// waited waitLong or more, from the runtime's cumulative histogram; 0 for
// fewer than minWaits schedulings.
func (t *Tuner) readWaits() float64 {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := t.sample[0].Value.Float64Histogram()
	if t.long < 0 {
		// Buckets[i] is the lower bound of Counts[i].
		t.long = len(h.Counts)
		for i := range h.Counts {
			if h.Buckets[i] >= waitLong.Seconds() || math.IsInf(h.Buckets[i], 1) {
				t.long = i
				break
			}
		}
	}
	var all, long uint64
	for i, c := range h.Counts {
		d := c
		if i < len(t.counts) {
			d -= t.counts[i]
		}
		all += d
		if i >= t.long {
			long += d
		}
	}
	t.counts = append(t.counts[:0], h.Counts...)
	if all < minWaits {
		return 0
	}
	return float64(long) / float64(all)
}
