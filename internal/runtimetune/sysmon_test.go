package runtimetune

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSysmonGauge(t *testing.T) {
	for _, steady := range []bool{true, false} {
		g := sysmonGauge(steady)
		problems, err := testutil.CollectAndLint(g)
		if err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
		want := 0.0
		if steady {
			want = 1
		}
		if got := testutil.ToFloat64(g); got != want {
			t.Errorf("sysmonGauge(%v) = %v, want %v", steady, got, want)
		}
	}
}

func TestSysmonExecEnv(t *testing.T) {
	for _, c := range []struct {
		name    string
		steady  bool
		environ []string
		want    []string // nil: no re-execution
	}{
		{"steady adds GODEBUG", true, []string{"HOME=/", "PATH=/bin"},
			[]string{"HOME=/", "PATH=/bin", "GODEBUG=" + SteadySchedtrace}},
		{"steady keeps other GODEBUG settings", true, []string{"GODEBUG=http2debug=1", "HOME=/"},
			[]string{"HOME=/", "GODEBUG=http2debug=1," + SteadySchedtrace}},
		{"the first GODEBUG is the one the runtime reads", true, []string{"GODEBUG=a=1", "GODEBUG=b=2"},
			[]string{"GODEBUG=a=1," + SteadySchedtrace}},
		{"an operator's schedtrace wins", true, []string{"GODEBUG=schedtrace=1000"}, nil},
		{"an operator's schedtrace=0 wins", true, []string{"GODEBUG=madvdontneed=1, schedtrace=0"}, nil},
		{"already re-executed", true, []string{"GODEBUG=" + SteadySchedtrace}, nil},
		{"go leaves the process as it is", false, []string{"HOME=/"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sysmonExecEnv(c.steady, c.environ); !slices.Equal(got, c.want) {
				t.Fatalf("sysmonExecEnv(%v, %q) = %q; want %q", c.steady, c.environ, got, c.want)
			}
		})
	}
}
