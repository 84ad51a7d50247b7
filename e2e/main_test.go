// Package e2e_test runs fanout against a real control plane: three
// kube-apiservers on their own test hosts, the real kube-controller-manager,
// kube-scheduler and kubectl. See the harness package for how it is built.
package e2e_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// The tests share one control plane: bringing one up costs a minute or more
// on two cores, and every test works in its own namespace with its own users
// so they cannot disturb each other's counts.
var shared struct {
	once sync.Once
	cp   *harness.ControlPlane
	err  error
}

// controlPlane returns the package's control plane, starting it on first
// use (so `go test -run` of one test starts only what it needs).
func controlPlane(t *testing.T) *harness.ControlPlane {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		// Progress goes to stderr, not t.Logf: the control plane outlives
		// the test that happens to start it.
		shared.cp, shared.err = harness.Start(ctx, nil, harness.Options{})
	})
	if shared.err != nil {
		t.Fatalf("starting the control plane: %v", shared.err)
	}
	return shared.cp
}
