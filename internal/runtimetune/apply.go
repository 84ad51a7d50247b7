package runtimetune

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Apply puts o into effect, logs to log what is in effect, and returns
// the collectors to register: fanout_sysmon_steady. It returns
// o.Validate's error, having changed nothing, for options that fail it.
//
// Call it once, early in main, before anything has been logged or
// started: with --sysmon steady the process executes itself again here
// (same arguments, same process ID), and it is best that the garbage
// collector works to the memory limit from the start. GOMAXPROCS is left
// to Go, which follows the container's CPU limit while the process runs
// unless something sets it.
func Apply(o Options, log *slog.Logger) ([]prometheus.Collector, error) {
	p, err := o.plan()
	if err != nil {
		return nil, err
	}
	var reexecErr error
	if env := sysmonExecEnv(p.steady, os.Environ()); env != nil {
		reexecErr = reexecForSysmon(env) // returns only on failure
	}
	lim, limErr := applyMemoryLimit(p.memoryLimit, os.Getenv("GOMEMLIMIT"), memlimit.FromCgroup, debug.SetMemoryLimit)

	if limErr != nil {
		// Not fatal: the sidecar runs as it would without a cgroup.
		log.Warn("cannot read the cgroup memory limit; the Go memory limit stays unset; set --memory-limit to the pod's limit to give the garbage collector one", "error", limErr)
	} else {
		logMemoryLimit(log, lim)
	}
	if reexecErr != nil {
		log.Warn("cannot execute fanout again with GODEBUG=schedtrace; Go's monitor thread keeps its deep sleep, as with --sysmon go", "error", reexecErr)
	}
	steady := sysmonSteady()
	log.Info("Go monitor thread", "steady", steady, "godebug", os.Getenv("GODEBUG"))
	log.Info("GOMAXPROCS in effect", "threads", runtime.GOMAXPROCS(0), "fromEnvironment", os.Getenv("GOMAXPROCS") != "", "cpus", runtime.NumCPU())
	return []prometheus.Collector{sysmonGauge(steady)}, nil
}

// logMemoryLimit says which Go memory limit is in effect and why.
func logMemoryLimit(log *slog.Logger, lim memoryLimit) {
	if lim.Source == sourceNone {
		log.Info("Go memory limit: none", "source", lim.Source)
		return
	}
	args := []any{"bytes", lim.Bytes, "source", lim.Source}
	if lim.Cgroup > 0 {
		args = append(args, "cgroupBytes", lim.Cgroup, "ratio", memoryRatio)
	}
	log.Info("Go memory limit set", args...)
}
