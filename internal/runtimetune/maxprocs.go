package runtimetune

// maxProcs is the GOMAXPROCS in effect and how it was chosen.
type maxProcs struct {
	N      int
	Source string // "flag", "GOMAXPROCS" or "runtime"
	// Adaptive is set when the tuner (internal/proctune) is to move
	// GOMAXPROCS between 1 and N with the load.
	Adaptive bool
}

// applyMaxProcs puts --max-procs (plan.maxProcs) into effect. current is
// the runtime's GOMAXPROCS (runtime.GOMAXPROCS(0), which only reads it),
// env the GOMAXPROCS environment variable, and set is runtime.GOMAXPROCS,
// called only for a fixed number:
//   - maxProcsAuto: nothing is set. Since Go 1.25 the runtime's choice
//     follows the container's CPU limit and affinity while the process
//     runs, unless something sets GOMAXPROCS, even to the value it has.
//   - maxProcsAdapt: one P while that is enough, up to the runtime's
//     choice at start when busy (internal/proctune, which the caller
//     starts when Adaptive is set). A GOMAXPROCS environment variable
//     makes it a fixed number instead: the operator chose it.
//   - a number: set, and wins over a GOMAXPROCS environment variable.
//
// With a fixed one P, about a third less CPU goes to 1k requests a second,
// but 5k a second of short requests cannot be served on the benchmark's
// machine (docs/footprint.md): a default must not cap a client's bursts.
func applyMaxProcs(spec int, env string, current int, set func(int) int) maxProcs {
	if spec > 0 {
		set(spec)
		return maxProcs{N: spec, Source: "flag"}
	}
	mp := maxProcs{N: current, Source: "runtime"}
	if env != "" {
		mp.Source = "GOMAXPROCS"
	}
	mp.Adaptive = spec == maxProcsAdapt && env == "" && mp.N > 1
	return mp
}
