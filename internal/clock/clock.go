package clock

import "time"

// Clock is what code that waits on time needs of it. Its methods may be
// called from any goroutine.
type Clock interface {
	// Now is time.Now.
	Now() time.Time
	// NewTimer is time.NewTimer.
	NewTimer(d time.Duration) Timer
	// NewTicker is time.NewTicker.
	NewTicker(d time.Duration) Ticker
}

// Timer is the part of *time.Timer that fanout uses.
type Timer interface {
	// C is the channel the timer fires on, once.
	C() <-chan time.Time
	// Stop keeps the timer from firing; it reports whether it was
	// pending.
	Stop() bool
}

// Ticker is the part of *time.Ticker that fanout uses.
type Ticker interface {
	// C is the channel the ticker ticks on; like time.Ticker's, it holds
	// one tick and drops ticks nobody took.
	C() <-chan time.Time
	// Stop ends the ticker.
	Stop()
}

// Real is the clock of the time package.
var Real Clock = system{}

// Or returns c, or Real if c is nil: for Config fields where nil means
// the real clock.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type system struct{}

func (system) Now() time.Time                   { return time.Now() }
func (system) NewTimer(d time.Duration) Timer   { return realTimer{time.NewTimer(d)} }
func (system) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }
