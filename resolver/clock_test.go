package resolver

import (
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// testClock is testkit.Clock behind this package's Clock interface.
type testClock struct{ *testkit.Clock }

var _ Clock = testClock{}

func newTestClock(t time.Time) testClock { return testClock{testkit.NewClock(t)} }

func (c testClock) NewTimer(d time.Duration) Timer   { return c.Clock.NewTimer(d) }
func (c testClock) NewTicker(d time.Duration) Ticker { return c.Clock.NewTicker(d) }

// pending reports whether a timer or ticker is armed.
func (c testClock) pending() bool { return c.Waiters() > 0 }
