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
}

// applyMaxProcs sets GOMAXPROCS from --max-procs: a number is set, and
// wins over a GOMAXPROCS environment variable (env); auto keeps what the
// runtime chose at start (GOMAXPROCS, else the container's CPU limit
// rounded up and at least 2, else every CPU). set is runtime.GOMAXPROCS.
//
// auto is the default. One P takes about a third less CPU at 1k requests
// a second, but it cannot keep up with 5k a second of short requests on
// the benchmark's machine (docs/footprint.md): a default must not cap a
// client's bursts.
func applyMaxProcs(spec, env string, set func(int) int) (maxProcs, error) {
	spec = strings.TrimSpace(spec)
	if spec == "auto" {
		source := "runtime"
		if env != "" {
			source = "GOMAXPROCS"
		}
		return maxProcs{N: set(0), Source: source}, nil
	}
	n, err := strconv.Atoi(spec)
	if err != nil || n < 1 {
		return maxProcs{}, fmt.Errorf("--max-procs %q: want auto or a whole number of at least 1", spec)
	}
	set(n)
	return maxProcs{N: n, Source: "flag"}, nil
}
