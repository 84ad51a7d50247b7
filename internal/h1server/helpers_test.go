package h1server

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait in these tests (testkit.WaitLimit): a
// failure bound for hangs, not a speed target.
const waitLimit = testkit.WaitLimit

// wait and waitFor are the kit's, under the names these tests use.
var wait = testkit.Wait

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	testkit.WaitFor(t, what, cond)
}
