package runtimetune

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/spf13/pflag"
)

// Options are the runtime tuning flags, as given.
type Options struct {
	MemoryLimit string // auto, off or a size
	Sysmon      string // go or steady
}

// NewOptions returns the defaults: Go's own runtime, with the memory
// limit from the container's cgroup.
func NewOptions() *Options {
	return &Options{MemoryLimit: "auto", Sysmon: "go"}
}

// AddFlags registers the options' flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit,
		"the Go runtime's soft memory limit, which makes the garbage collector work harder as memory use nears it: "+
			"auto (90% of the container's cgroup memory limit, cgroup v1, v2 or both side by side; none without one; "+
			"a GOMEMLIMIT environment variable wins), off, or a size such as 96Mi. The limit in effect is logged at "+
			"start and exported as go_gc_gomemlimit_bytes")
	fs.StringVar(&o.Sysmon, "sysmon", o.Sysmon,
		"How Go's monitor thread (sysmon) sleeps. go (the default) leaves Go's behaviour: it sleeps while every "+
			"thread is idle, and the next system call wakes it to poll every 20 µs again. steady (opt-in) keeps it "+
			"polling every 10 ms at the most, idle or not, through GODEBUG=schedtrace=2147483647 (a side effect of a "+
			"scheduler trace setting, which a Go release may change; one trace line at start on a node up longer than "+
			"24.8 days), for which fanout executes itself again at start, with the same process ID. A GODEBUG that "+
			"sets schedtrace wins. Measured at 1k requests per second over 10 interleaved rounds: median 2.15 against "+
			"2.71 s of proxy CPU per 10k requests, less in 9 rounds of 10; at saturation over 10 other rounds: median "+
			"7,916 against 6,329 requests per CPU-second (docs/footprint.md). fanout_sysmon_steady "+
			"is 1 while in effect")
}

// Validate reports every flag that Apply cannot put into effect.
func (o *Options) Validate() error {
	_, err := o.plan()
	return err
}

// memoryLimitAuto is plan.memoryLimit for auto.
const memoryLimitAuto = 0

// plan is Options parsed.
type plan struct {
	memoryLimit int64 // memoryLimitAuto, math.MaxInt64 (off) or bytes
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
	switch strings.TrimSpace(o.Sysmon) {
	case "steady":
		p.steady = true
	case "go":
	default:
		errs = append(errs, fmt.Errorf("--sysmon %q: want go or steady", o.Sysmon))
	}
	return p, errors.Join(errs...)
}
