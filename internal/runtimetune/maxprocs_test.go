package runtimetune

import (
	"testing"
)

func TestApplyMaxProcs(t *testing.T) {
	for _, c := range []struct {
		name    string
		spec    int
		env     string
		current int // the runtime's GOMAXPROCS; 0: 4
		want    maxProcs
		set     int // the GOMAXPROCS set; 0: none
	}{
		{name: "adaptive tunes up to the runtime's", spec: maxProcsAdapt, want: maxProcs{4, "runtime", true}},
		{name: "adaptive is fixed by the environment", spec: maxProcsAdapt, env: "4", want: maxProcs{4, "GOMAXPROCS", false}},
		{name: "adaptive with one CPU has nothing to tune", spec: maxProcsAdapt, current: 1, want: maxProcs{1, "runtime", false}},
		{name: "auto keeps the runtime's", spec: maxProcsAuto, want: maxProcs{4, "runtime", false}},
		{name: "auto with the environment", spec: maxProcsAuto, env: "4", want: maxProcs{4, "GOMAXPROCS", false}},
		{name: "a number", spec: 1, want: maxProcs{1, "flag", false}, set: 1},
		{name: "a number wins over the environment", spec: 3, env: "4", want: maxProcs{3, "flag", false}, set: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			current, set := 4, 0
			if c.current > 0 {
				current = c.current
			}
			got := applyMaxProcs(c.spec, c.env, current, func(n int) int {
				// Any call, even with 0 or the current value, would
				// be a mistake where none is wanted: the test counts
				// it.
				set = n
				if n <= 0 {
					set = -1
				}
				return current
			})
			if got != c.want || set != c.set {
				t.Errorf("applyMaxProcs(%d, env %q) = %+v, set %d; want %+v, set %d", c.spec, c.env, got, set, c.want, c.set)
			}
		})
	}
}
