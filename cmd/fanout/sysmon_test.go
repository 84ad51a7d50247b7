package main

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/internal/testpki"
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
		spec    string
		environ []string
		want    []string // nil: no re-execution
		wantErr string
	}{
		{"steady adds GODEBUG", "steady", []string{"HOME=/", "PATH=/bin"},
			[]string{"HOME=/", "PATH=/bin", "GODEBUG=" + steadySchedtrace}, ""},
		{"steady keeps other GODEBUG settings", "steady", []string{"GODEBUG=http2debug=1", "HOME=/"},
			[]string{"HOME=/", "GODEBUG=http2debug=1," + steadySchedtrace}, ""},
		{"the first GODEBUG is the one the runtime reads", "steady", []string{"GODEBUG=a=1", "GODEBUG=b=2"},
			[]string{"GODEBUG=a=1," + steadySchedtrace}, ""},
		{"an operator's schedtrace wins", "steady", []string{"GODEBUG=schedtrace=1000"}, nil, ""},
		{"an operator's schedtrace=0 wins", "steady", []string{"GODEBUG=madvdontneed=1, schedtrace=0"}, nil, ""},
		{"already re-executed", "steady", []string{"GODEBUG=" + steadySchedtrace}, nil, ""},
		{"go leaves the process as it is", "go", []string{"HOME=/"}, nil, ""},
		{"invalid", "never", nil, nil, `--sysmon "never": want steady or go`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := sysmonExecEnv(c.spec, c.environ)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("sysmonExecEnv(%q, %q) = %q, %v; want %q", c.spec, c.environ, got, err, c.want)
			}
		})
	}
}

// TestSysmonInEffect runs the binary: by default it has executed itself
// again, with the same process ID, with the schedtrace that keeps sysmon
// from its deep sleep, and says so in /metrics; with --sysmon go it has not.
func TestSysmonInEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if _, set := schedtrace(os.Getenv("GODEBUG")); set {
		t.Skip("GODEBUG sets schedtrace in the test's environment")
	}
	bin := buildFanout(t)
	ca := testpki.NewCA(t)
	upstream := tlsUpstream(t, ca, http.NotFoundHandler())
	for _, c := range []struct {
		name   string
		args   []string
		steady bool
	}{
		{"default", nil, true},
		{"go", []string{"--sysmon", "go"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFootprintFanout(t, bin, ca, upstream.URL, c.args...)
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", f.pid))
			if err != nil {
				t.Fatal(err)
			}
			var godebug string
			for _, kv := range strings.Split(string(raw), "\x00") {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					godebug = v
					break
				}
			}
			if got := strings.Contains(godebug, steadySchedtrace); got != c.steady {
				t.Errorf("process %d runs with GODEBUG %q; want %s there: %v", f.pid, godebug, steadySchedtrace, c.steady)
			}
			want := "\nfanout_sysmon_steady 0\n"
			if c.steady {
				want = "\nfanout_sysmon_steady 1\n"
			}
			if body := scrape(t, f.admin); !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
			}
		})
	}
}
