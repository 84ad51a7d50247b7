package resolver

import (
	"sync"
	"time"
)

// fakeClock is a Clock that moves only when a test steps it. Like
// k8s.io/utils/clock/testing's FakeClock, which these tests used before:
// a timer fires once when its time is reached, a ticker fires at most once
// per step (its channel holds one tick) and then re-arms past now.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
}

type fakeWaiter struct {
	c      *fakeClock
	at     time.Time
	period time.Duration // 0 for a timer
	ch     chan time.Time
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer   { return c.add(d, 0) }
func (c *fakeClock) NewTicker(d time.Duration) Ticker { return fakeTicker{c.add(d, d)} }

func (c *fakeClock) add(d, period time.Duration) *fakeWaiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWaiter{c: c, at: c.now.Add(d), period: period, ch: make(chan time.Time, 1)}
	c.waiters = append(c.waiters, w)
	return w
}

// HasWaiters reports whether a timer or ticker is pending.
func (c *fakeClock) HasWaiters() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) > 0
}

// Step moves the clock by d and fires what became due.
func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		select {
		case w.ch <- c.now:
		default:
		}
		if w.period > 0 {
			for !w.at.After(c.now) {
				w.at = w.at.Add(w.period)
			}
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

func (w *fakeWaiter) C() <-chan time.Time { return w.ch }

func (w *fakeWaiter) Stop() bool {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	for i, x := range w.c.waiters {
		if x == w {
			w.c.waiters = append(w.c.waiters[:i], w.c.waiters[i+1:]...)
			return true
		}
	}
	return false
}

type fakeTicker struct{ *fakeWaiter }

func (t fakeTicker) Stop() { t.fakeWaiter.Stop() }
