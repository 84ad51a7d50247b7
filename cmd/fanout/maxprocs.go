package main

import (
	"fmt"
	"strconv"
	"strings"
)

// maxProcs is the GOMAXPROCS in effect and how it was chosen.
type maxProcs struct {
	N      int
	Source string // "flag", "GOMAXPROCS" or "runtime"
	// Adaptive is set when the tuner (internal/proctune) moves GOMAXPROCS
	// between 1 and N with the load.
	Adaptive bool
}

// applyMaxProcs reads --max-procs:
//   - adaptive (the default): one P while that is enough, up to the
//     runtime's choice at start when busy (internal/proctune). A
//     GOMAXPROCS environment variable makes it a fixed number instead:
//     the operator chose it.
//   - auto: the runtime's choice at start (GOMAXPROCS, else the
//     container's CPU limit rounded up and at least 2, else every CPU).
//   - a number: set, and wins over a GOMAXPROCS environment variable.
//
// set is runtime.GOMAXPROCS: called with 0 to read the runtime's choice,
// with the number to set one.
// With a fixed one P, about a third less CPU goes to 1k requests a second,
// but 5k a second of short requests cannot be served on the benchmark's
// machine (docs/footprint.md): a default must not cap a client's bursts.
func applyMaxProcs(spec, env string, set func(int) int) (maxProcs, error) {
	switch spec = strings.TrimSpace(spec); spec {
	case "auto", "adaptive":
		mp := maxProcs{N: set(0), Source: "runtime"}
		if env != "" {
			mp.Source = "GOMAXPROCS"
		}
		mp.Adaptive = spec == "adaptive" && env == "" && mp.N > 1
		return mp, nil
	}
	n, err := strconv.Atoi(spec)
	if err != nil || n < 1 {
		return maxProcs{}, fmt.Errorf("--max-procs %q: want adaptive, auto or a whole number of at least 1", spec)
	}
	set(n)
	return maxProcs{N: n, Source: "flag"}, nil
}
