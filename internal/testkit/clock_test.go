package testkit

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestClockTimersAndTickers(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	timer := c.NewTimer(2 * time.Second)
	ticker := c.NewTicker(time.Second)
	stopped := c.NewTimer(time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop reports pending, then not")
	}
	ready := func(ch <-chan time.Time) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	for i, tc := range []struct {
		advance           time.Duration
		wantFired         int
		wantTimer, wantTk bool
		wantWaiters       int
	}{
		{999 * time.Millisecond, 0, false, false, 2},
		{time.Millisecond, 1, false, true, 2},
		{time.Second, 2, true, true, 1},
		// Three periods at once: one tick, as the channel holds one.
		{3 * time.Second, 1, false, true, 1},
	} {
		if got := c.Advance(tc.advance); got != tc.wantFired {
			t.Errorf("step %d: Advance fired %d, want %d", i, got, tc.wantFired)
		}
		if got := ready(timer.C()); got != tc.wantTimer {
			t.Errorf("step %d: timer fired %v, want %v", i, got, tc.wantTimer)
		}
		if got := ready(ticker.C()); got != tc.wantTk {
			t.Errorf("step %d: ticker ticked %v, want %v", i, got, tc.wantTk)
		}
		if got := c.Waiters(); got != tc.wantWaiters {
			t.Errorf("step %d: %d waiters, want %d", i, got, tc.wantWaiters)
		}
	}
	if got, want := c.Now(), start.Add(5*time.Second); !got.Equal(want) {
		t.Errorf("Now %v, want %v", got, want)
	}
	ticker.Stop()
	if c.Waiters() != 0 {
		t.Error("a stopped ticker is still pending")
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Error("Set did not move the clock")
	}
	select {
	case <-c.NewTimer(0).C():
		t.Error("a timer of 0 fired before Advance")
	default:
	}
}

// TestClockConcurrent is for the race detector.
func TestClockConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock(time.Unix(0, 0))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 100 {
				<-c.NewTicker(time.Second).C()
			}
		}()
		for {
			c.Advance(time.Second)
			select {
			case <-done:
				return
			default:
				synctest.Wait()
			}
		}
	})
}
