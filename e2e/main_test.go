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

// controlPlane is the preamble of a test on the package's shared control
// plane: it skips the test under -short, starts the control plane on first
// use (so `go test -run` of one test starts only what it needs), and
// returns it with a context that ends after timeout or when the test ends.
func controlPlane(t *testing.T, timeout time.Duration) (context.Context, *harness.ControlPlane) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the control plane")
	}
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
	return testContext(t, timeout), shared.cp
}

// testContext returns a context that ends after timeout, or when the test
// ends: t.Context ends before the test's cleanups run, as a deferred
// cancel would.
func testContext(t *testing.T, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// ownControlPlane is the preamble of a test that needs a control plane of
// its own, because it stops, restarts, cuts or reconfigures an apiserver,
// which would skew the counts of the tests that share controlPlane's. It
// skips the test under -short, and returns a context that ends after
// timeout (or when the test ends) and the control plane of opts, with one
// node unless opts says otherwise, progress to t.Logf; it is torn down with
// the test.
func ownControlPlane(t *testing.T, timeout time.Duration, opts harness.Options) (context.Context, *harness.ControlPlane) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane of its own")
	}
	ctx := testContext(t, timeout)
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	cp, err := harness.Start(ctx, t, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, cp
}

// userFanout starts a fanout sidecar (name user, with args) on a
// kubeconfig of user's own, and logs the tail of its log if the test
// fails. What user may do is the caller's to grant (userNamespace).
func userFanout(ctx context.Context, t *testing.T, cp *harness.ControlPlane, user string, args ...string) *harness.Fanout {
	t.Helper()
	kubeconfig, err := cp.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	f, err := cp.StartFanout(ctx, t, user, kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	logOnFailure(t, f)
	return f
}
