package runtimetune

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAutoLeavesGOMAXPROCSToGo checks that Apply leaves Go's updates of
// GOMAXPROCS on: after it, the process's threads
// are moved to one CPU, as a changed CPU limit or cpuset would, and the
// runtime must follow within a few seconds (it looks once a second).
// Any runtime.GOMAXPROCS(n) in Apply, even with the value in effect,
// turns the updates off for good, and the test times out.
func TestAutoLeavesGOMAXPROCSToGo(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("a GOMAXPROCS environment variable turns Go's updates off")
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	if all.Count() < 2 {
		t.Skip("needs two CPUs to take one away")
	}
	// Another test may have set GOMAXPROCS in this process; start from
	// the runtime's own choice, with its updates on.
	runtime.SetDefaultGOMAXPROCS()
	defer runtime.SetDefaultGOMAXPROCS()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))

	o := Options{MemoryLimit: "off", Sysmon: "go"}
	if _, err := Apply(o, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	var one unix.CPUSet
	for cpu := range 1024 {
		if all.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	setThreadAffinity(t, &one)
	defer setThreadAffinity(t, &all)
	for deadline := time.Now().Add(10 * time.Second); runtime.GOMAXPROCS(0) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS is %d 10 s after the process was moved to one CPU, want 1: Go's updates are off, so something set GOMAXPROCS", runtime.GOMAXPROCS(0))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// setThreadAffinity moves every thread of this process to set. Threads
// started later inherit it from the one that starts them.
func setThreadAffinity(t *testing.T, set *unix.CPUSet) {
	t.Helper()
	// Twice, for threads started while the first pass ran.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				t.Fatalf("sched_setaffinity(%d): %v", tid, err)
			}
		}
	}
}
