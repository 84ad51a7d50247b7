//go:build unix

package proctune

import (
	"syscall"
	"time"
)

const haveProcessCPU = true

// processCPU is the CPU time of every thread of the process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
