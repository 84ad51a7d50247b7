// Package gctune gives the garbage collector a headroom in bytes: the next
// collection starts once the heap has grown by that much past what the
// last one found live. The headroom gives back half of what is in use, down
// to half its size (Headroom), and is a quarter of the live heap at the
// least once that is larger.
//
// With GOGC=100 the runtime collects when the heap has grown by as much
// as it held live after the last collection, and at the least every 4 MiB.
// A sidecar proxying short requests keeps about 2 MiB live and allocates
// about 13 KiB per request, so at a few thousand requests per second it
// collected about ten times a second, and the collector took about a tenth
// of its CPU (measured with GODEBUG=gctrace=1 under `make bench`'s
// saturation phase; see docs/footprint.md).
//
// The tuner sets GOGC after each collection so that the next one waits for
// that headroom of new allocation. While the live heap is small it raises
// GOGC, so that short requests do not start a collection every few
// megabytes. Once the live heap is larger than the headroom (thousands of
// open watches) it lowers GOGC, down to minPercent, so that the heap stays
// near live + headroom instead of doubling: with 2,000 watches GOGC=100
// let the heap grow by about 24 MB between collections (gctrace under
// `make bench`'s scale section; docs/footprint.md). The larger the heap in
// use, the less headroom (Headroom): short requests keep about 2 MiB live,
// and for them the headroom saves CPU; thousands of watches keep about 15
// MiB, and for them each megabyte of headroom is a megabyte of the
// sidecar's memory with little CPU to save, since they allocate little. An
// explicit GOGC environment variable is the floor instead: the operator
// chose it. A Go memory limit (GOMEMLIMIT, --memory-limit) still caps the
// heap.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxPercent bounds the GOGC the tuner sets, so that a nearly empty heap
// does not ask for an absurd ratio.
const maxPercent = 10000

// minPercent is the least GOGC the tuner sets when GOGC is not in the
// environment: with a large live heap the collector then runs once a
// quarter of it has been allocated again, not every few megabytes.
const minPercent = 25

// Tuner adjusts GOGC after every collection. Stop ends it and restores the
// GOGC that was in effect when it started.
type Tuner struct {
	headroom uint64
	base     int // GOGC at Start, restored by Stop
	floor    int // never set lower than this

	mu      sync.Mutex
	stopped bool
	percent int // last value set

	sample []metrics.Sample
	// set is debug.SetGCPercent; a test replaces it.
	set func(int) int
}

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with GOGC (runtime/mgcpacer.go, defaultHeapMinimum).
const heapMinimum = 4 << 20

// Headroom is the headroom left above inUse bytes (the live heap and the
// stacks and globals the collector scans) when headroom is configured: the
// configured headroom less half of inUse, and at least half the
// configured headroom. With 16 MiB configured that is 15 MiB with 2 MiB in
// use (short requests), 8.5 MiB with 15 MiB (2,000 watches), and 8 MiB
// from 16 MiB in use on, where the quarter of the live heap that Percent's
// floor keeps soon takes over.
func Headroom(inUse, headroom uint64) uint64 {
	return max(headroom/2, headroom-min(headroom, inUse/2))
}

// Percent is the GOGC that makes the next collection's goal
// live+Headroom(live+scan, headroom) bytes, within [floor, maxPercent].
// The runtime's goal is the larger of live + (live+scan)×GOGC/100, where
// scan is the stacks and globals it scans, and heapMinimum×GOGC/100; for a
// live heap under heapMinimum the second bounds the percentage; before the
// first collection live is 0 and only the second applies.
func Percent(live, scan, headroom uint64, floor int) int {
	headroom = Headroom(live+scan, headroom)
	p := (live + headroom) * 100 / heapMinimum
	if live+scan > 0 {
		p = min(p, headroom*100/(live+scan))
	}
	return max(int(min(p, maxPercent)), floor)
}

// Start begins tuning with the given headroom in bytes and returns the
// tuner. It does nothing (and returns nil) when headroom is not positive
// or GOGC is off. An explicit GOGC in the environment is the least GOGC it
// sets; otherwise that is minPercent.
func Start(headroom int64) *Tuner {
	if headroom <= 0 {
		return nil
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 {
		return nil // GOGC=off: the memory limit alone drives the collector
	}
	floor := minPercent
	if os.Getenv("GOGC") != "" {
		floor = base
	}
	t := &Tuner{
		headroom: uint64(headroom),
		base:     base,
		floor:    floor,
		percent:  base,
		sample: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"},
			{Name: "/gc/scan/stack:bytes"},
			{Name: "/gc/scan/globals:bytes"},
		},
		set: debug.SetGCPercent,
	}
	t.adjust()
	t.arm()
	return t
}

// Percent reports the GOGC the tuner set last.
func (t *Tuner) Percent() int {
	if t == nil {
		return -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop ends the tuning and restores the GOGC in effect at Start.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	t.set(t.base)
	t.percent = t.base
}

// sentinel is garbage as soon as it is made; its cleanup runs after the
// collection that found it, which is how the tuner learns that one
// finished. It holds a pointer so that it is not a tiny allocation, whose
// cleanup could wait for its neighbours.
type sentinel struct {
	_ *Tuner
	_ [2]uintptr
}

func (t *Tuner) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) { t.afterGC() }, t)
}

func (t *Tuner) afterGC() {
	t.mu.Lock()
	stopped := t.stopped
	t.mu.Unlock()
	if stopped {
		return
	}
	t.adjust()
	t.arm()
}

// adjust sets GOGC from the live heap the last collection measured. It
// changes nothing for a difference under a tenth, so that a steady heap
// does not set GOGC after every cycle.
func (t *Tuner) adjust() {
	metrics.Read(t.sample)
	var v [3]uint64
	for i, s := range t.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		v[i] = s.Value.Uint64()
	}
	p := Percent(v[0], v[1]+v[2], t.headroom, t.floor)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if d := p - t.percent; d*10 > t.percent || -d*10 > t.percent {
		t.set(p)
		t.percent = p
	}
}
