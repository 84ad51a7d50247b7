package testkit

import (
	"syscall"
	"testing"
)

// ReportCPU starts counting the process's CPU time (user and system) and
// returns the function that reports it, per iteration, as cpu-ns/op: a
// benchmark whose server runs in the same process prices both sides.
//
//	defer testkit.ReportCPU(b)()
func ReportCPU(b *testing.B) func() {
	start := cpuNanos()
	return func() { b.ReportMetric(float64(cpuNanos()-start)/float64(b.N), "cpu-ns/op") }
}

func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
