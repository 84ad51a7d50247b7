package clock

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestOr(t *testing.T) {
	if Or(nil) != Real {
		t.Error("Or(nil) is not Real")
	}
	c := other{}
	if Or(c) != Clock(c) {
		t.Error("Or(c) is not c")
	}
}

type other struct{ system }

// TestReal checks that Real's timers and tickers are the time package's:
// in a bubble, time moves only as far as they wait.
func TestReal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := Real.Now()
		<-Real.NewTimer(3 * time.Second).C()
		if got := Real.Now().Sub(start); got != 3*time.Second {
			t.Errorf("timer fired after %s, want 3s", got)
		}

		stopped := Real.NewTimer(time.Second)
		if !stopped.Stop() {
			t.Error("Stop of a pending timer = false, want true")
		}
		if stopped.Stop() {
			t.Error("second Stop = true, want false")
		}

		tick := Real.NewTicker(2 * time.Second)
		defer tick.Stop()
		start = Real.Now()
		for i := 1; i <= 3; i++ {
			<-tick.C()
			if got, want := Real.Now().Sub(start), time.Duration(i)*2*time.Second; got != want {
				t.Errorf("tick %d after %s, want %s", i, got, want)
			}
		}
	})
}
