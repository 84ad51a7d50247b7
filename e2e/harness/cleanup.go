package harness

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"testing"
)

// The registry holds every teardown that is still pending, so a signal can
// run them all: t.Cleanup alone never runs when the test binary is
// interrupted, and a leaked network namespace or apiserver would outlive us.
var registry struct {
	mu     sync.Mutex
	next   int
	funcs  map[int]func()
	closed bool
}

// register adds fn to the registry and returns a function that removes it
// again. fn must be idempotent: it may run from a signal and from its owner.
func register(fn func()) (unregister func()) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.funcs == nil {
		registry.funcs = map[int]func(){}
	}
	id := registry.next
	registry.next++
	registry.funcs[id] = fn
	return func() {
		registry.mu.Lock()
		delete(registry.funcs, id)
		registry.mu.Unlock()
	}
}

// runRegistered runs every pending teardown, newest first, so that things are
// stopped before what they depend on (a sidecar before its apiservers, the
// apiservers before etcd and the network).
func runRegistered() {
	registry.mu.Lock()
	ids := make([]int, 0, len(registry.funcs))
	for id := range registry.funcs {
		ids = append(ids, id)
	}
	funcs := registry.funcs
	registry.funcs = map[int]func(){}
	registry.mu.Unlock()

	sort.Sort(sort.Reverse(sort.IntSlice(ids)))
	for _, id := range ids {
		funcs[id]()
	}
}

// onCleanup arranges for fn to run once: at the end of tb (when tb is not
// nil), at the end of Main, or on SIGINT/SIGTERM, whichever comes first.
func onCleanup(tb testing.TB, fn func()) {
	var once sync.Once
	run := func() { once.Do(fn) }
	unregister := register(run)
	if tb != nil {
		tb.Cleanup(func() {
			unregister()
			run()
		})
	}
}

// Main wraps m.Run for a package whose tests use the harness. It sweeps
// namespaces and links left behind by SIGKILLed runs, tears everything down
// on SIGINT or SIGTERM before exiting, and runs the teardowns of resources
// shared by the package (such as a ControlPlane started lazily by the first
// test) after the tests. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	if err := SweepStale(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: sweeping leftovers of earlier runs: %v\n", err)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "harness: got %v, tearing down the control plane\n", sig)
			runRegistered()
			os.Exit(130)
		case <-done:
		}
	}()

	code := m.Run()
	signal.Stop(sigs)
	close(done)
	runRegistered()
	return code
}
