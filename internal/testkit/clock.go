package testkit

import (
	"sync"
	"time"

	"github.com/fanout-dev/fanout/internal/clock"
)

var _ clock.Clock = (*Clock)(nil)

// Clock is a clock.Clock that moves only when the test advances it, for
// code that takes its time source as a value (a clock.Clock, or a Now func
// taken from one). It is safe for concurrent use.
//
// Its timers and tickers behave like k8s.io/utils/clock/testing's: a
// timer fires once when its time is reached; a ticker's channel holds one
// tick, so it fires at most once per Advance and then re-arms past now.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*timer
}

// NewClock returns a Clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (also backwards) without firing anything: for
// placing a test at a moment, not for letting time pass.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock on by d and fires the timers and tickers that
// became due, returning how many fired.
func (c *Clock) Advance(d time.Duration) (fired int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		fired++
		select {
		case w.ch <- c.now:
		default: // a ticker whose last tick is still unread
		}
		if w.period > 0 {
			for !w.at.After(c.now) {
				w.at = w.at.Add(w.period)
			}
			kept = append(kept, w)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
	return fired
}

// Waiters is the number of timers and tickers pending, so a test can wait
// until the code under test has armed one before it advances the clock.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// NewTimer is time.NewTimer on this clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer { return c.add(d, 0) }

// NewTicker is time.NewTicker on this clock.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker { return &ticker{c.add(d, d)} }

func (c *Clock) add(d, period time.Duration) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &timer{c: c, at: c.now.Add(d), period: period, ch: make(chan time.Time, 1)}
	c.waiters = append(c.waiters, w)
	return w
}

// timer is a clock.Timer on a Clock, and the state of a ticker.
type timer struct {
	c      *Clock
	at     time.Time
	period time.Duration // 0 for a timer
	ch     chan time.Time
}

// C is the channel the timer fires on.
func (t *timer) C() <-chan time.Time { return t.ch }

// Stop keeps the timer from firing; it reports whether it was pending.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, w := range t.c.waiters {
		if w == t {
			t.c.waiters = append(t.c.waiters[:i], t.c.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// ticker is a clock.Ticker on a Clock.
type ticker struct{ t *timer }

// C is the channel the ticker ticks on.
func (t *ticker) C() <-chan time.Time { return t.t.C() }

// Stop ends the ticker.
func (t *ticker) Stop() { t.t.Stop() }
