package runtimetune

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Options are the runtime tuning flags, as given.
type Options struct {
	MemoryLimit string // auto, off or a size
	GCHeadroom  string // a size; 0 is off
	MaxProcs    string // auto, adaptive or a whole number
	Sysmon      string // steady or go
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{MemoryLimit: "auto", GCHeadroom: "16Mi", MaxProcs: "auto", Sysmon: "steady"}
}

// AddFlags registers the options' flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit,
		"the Go runtime's soft memory limit, which makes the garbage collector work harder as memory use nears it: "+
			"auto (90% of the container's cgroup memory limit, none without one; a GOMEMLIMIT environment variable wins), "+
			"off, or a size such as 96Mi. The limit in effect is logged at start and exported as go_gc_gomemlimit_bytes")
	fs.StringVar(&o.GCHeadroom, "gc-headroom", o.GCHeadroom,
		"How much the heap may grow past the live heap between two garbage collections: GOGC is set after each "+
			"collection to leave this much, raised while the live heap is small (fewer collections under many short "+
			"requests) and lowered, to 25 at the least, while it is large (many open watches), so that memory stays near "+
			"live heap + headroom. The headroom shrinks by half of what the collector found in use (live heap, stacks, "+
			"globals), down to half this value: 16Mi leaves 15 MiB above 2 MiB in use and 8 MiB from 16 MiB on. "+
			"An explicit GOGC environment variable is the least GOGC it sets; "+
			"0 turns it off; a GOGC environment variable of off turns it off too")
	fs.StringVar(&o.MaxProcs, "max-procs", o.MaxProcs,
		"How many threads run fanout's Go code at once (GOMAXPROCS). auto leaves it to Go: a GOMAXPROCS environment "+
			"variable, else the container's CPU limit rounded up and at least 2, else every CPU of the node, and Go "+
			"follows a CPU limit or affinity changed while the pod runs. adaptive runs it on one thread while that is "+
			"enough and on up to Go's choice at start while the process is busy (25 ms of load is enough to move up, "+
			"250 ms from idle; a second of quiet to move back), and no longer follows a changed CPU limit; measured: "+
			"about a quarter less CPU than auto at 1k requests per second (medians 4.61 against 6.51 s per 15k "+
			"requests; fanout-bench -sections overhead -targets fanout -rates 1000,5000 -phase 15s -runs 1 -warmup 3s, "+
			"docs/footprint.md); at 5k and at saturation both run on two threads. A whole number is fixed and wins over "+
			"GOMAXPROCS, which otherwise fixes it too. The most in effect is logged at start; "+
			"go_sched_gomaxprocs_threads is the current value")
	fs.StringVar(&o.Sysmon, "sysmon", o.Sysmon,
		"How Go's monitor thread (sysmon) sleeps. steady keeps it polling every 10 ms at the most, idle or not; go "+
			"leaves Go's behaviour, where it sleeps while every thread is idle and the next system call wakes it to poll "+
			"every 20 µs again, which under a client's requests is a thread switch for about every other request. steady "+
			"sets GODEBUG=schedtrace=2147483647 (the runtime's only switch for it: a scheduler trace every 24.8 days, so "+
			"one trace line at start on a node up longer than that), for which fanout executes itself again at start, "+
			"with the same process ID. A GODEBUG that sets schedtrace wins. Measured: about a quarter less CPU "+
			"at 1k requests per second, 0.13–0.16 s more CPU per idle minute (docs/footprint.md). fanout_sysmon_steady is 1 "+
			"while in effect")
}

// Validate reports every flag that Apply cannot put into effect.
func (o *Options) Validate() error {
	_, err := o.plan()
	return err
}

// The values of plan.memoryLimit and plan.maxProcs that are not a number
// the operator gave.
const (
	memoryLimitAuto = 0
	maxProcsAuto    = 0
	maxProcsAdapt   = -1
)

// plan is Options parsed.
type plan struct {
	memoryLimit int64 // memoryLimitAuto, math.MaxInt64 (off) or bytes
	headroom    int64 // bytes; 0 is off
	maxProcs    int   // maxProcsAuto, maxProcsAdapt or a number
	steady      bool  // --sysmon steady
}

func (o *Options) plan() (plan, error) {
	var p plan
	var errs []error
	switch spec := strings.TrimSpace(o.MemoryLimit); spec {
	case "auto", "":
		p.memoryLimit = memoryLimitAuto
	case "off":
		p.memoryLimit = math.MaxInt64
	default:
		b, err := parseSize(spec)
		if err != nil || b <= 0 {
			errs = append(errs, fmt.Errorf("--memory-limit %q: want auto, off, or a positive size such as 96Mi", spec))
		}
		p.memoryLimit = b
	}
	h, err := parseSize(o.GCHeadroom)
	if err != nil || h < 0 {
		errs = append(errs, fmt.Errorf("--gc-headroom %q: want 0 or a size such as 16Mi", o.GCHeadroom))
	}
	p.headroom = h
	switch spec := strings.TrimSpace(o.MaxProcs); spec {
	case "auto":
		p.maxProcs = maxProcsAuto
	case "adaptive":
		p.maxProcs = maxProcsAdapt
	default:
		n, err := strconv.Atoi(spec)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("--max-procs %q: want auto, adaptive or a whole number of at least 1", spec))
		}
		p.maxProcs = n
	}
	switch strings.TrimSpace(o.Sysmon) {
	case "steady":
		p.steady = true
	case "go":
	default:
		errs = append(errs, fmt.Errorf("--sysmon %q: want steady or go", o.Sysmon))
	}
	return p, errors.Join(errs...)
}
