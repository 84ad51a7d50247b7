package main

import (
	"fmt"
	"strconv"
	"strings"
)

// defaultMaxProcs is --max-procs when neither the flag nor GOMAXPROCS is
// given. A sidecar serves one client: one P serves the benchmark's
// saturation load of short requests on its own, and with more the runtime
// spends its CPU handing each request between threads (waking idle ones,
// spinning, context switches) rather than on the request. Go's own default
// is every CPU of the node, or the container's CPU limit rounded up and at
// least 2; the injector sets no CPU limit. docs/footprint.md has the
// measurements.
const defaultMaxProcs = 1

// maxProcs is how the GOMAXPROCS in effect was chosen.
type maxProcs struct {
	N      int
	Source string // "flag", "GOMAXPROCS", "default" or "runtime"
}

// applyMaxProcs sets GOMAXPROCS from --max-procs. spec is the flag's
// value, given whether it was on the command line, env the GOMAXPROCS
// environment variable. An explicit --max-procs wins; then GOMAXPROCS,
// which the runtime applied at start; then defaultMaxProcs. "auto" keeps
// the runtime's choice. set is runtime.GOMAXPROCS.
func applyMaxProcs(spec string, given bool, env string, set func(int) int) (maxProcs, error) {
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
	switch {
	case given:
		set(n)
		return maxProcs{N: n, Source: "flag"}, nil
	case env != "":
		return maxProcs{N: set(0), Source: "GOMAXPROCS"}, nil
	}
	set(n)
	return maxProcs{N: n, Source: "default"}, nil
}
