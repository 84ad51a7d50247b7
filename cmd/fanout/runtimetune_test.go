package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/runtimetune"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestMaxProcsInEffect runs the binary and reads the GOMAXPROCS in effect
// from its metrics. With the default (auto) it is Go's own choice, which
// the test binary's runtime made the same way. With --max-procs adaptive
// an idle sidecar settles on one P; it may move up while it starts, so
// the test waits for that. The tuner's counters are there either way.
func TestMaxProcsInEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
	upstream := tlsUpstream(t, ca, http.NotFoundHandler())

	runtimes := runtime.GOMAXPROCS(0)
	idle := 1
	if os.Getenv("GOMAXPROCS") != "" {
		idle = runtimes // the environment fixes it
	}
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"auto-default", nil, runtimes}, // no commas: the name is in the kubeconfig's flow-style paths
		{"adaptive-idle", []string{"--max-procs", "adaptive"}, idle},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFootprintFanout(t, bin, ca, upstream.URL, c.args...)
			want := fmt.Sprintf("go_sched_gomaxprocs_threads %d", c.want)
			var got string
			for deadline := time.Now().Add(15 * time.Second); ; {
				body := scrape(t, f.admin)
				got = "no go_sched_gomaxprocs_threads sample"
				if i := strings.Index(body, "\ngo_sched_gomaxprocs_threads "); i >= 0 {
					got, _, _ = strings.Cut(body[i+1:], "\n")
				}
				if got == want {
					if !strings.Contains(body, `fanout_gomaxprocs_changes_total{to="max"}`) {
						t.Errorf("/metrics has no fanout_gomaxprocs_changes_total{to=\"max\"}")
					}
					return
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Errorf("/metrics has %q after 15 s, want %q", got, want)
		})
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestSysmonInEffect runs the binary: by default it has executed itself
// again, with the same process ID, with the schedtrace that keeps sysmon
// from its deep sleep, and says so in /metrics; with --sysmon go it has not.
func TestSysmonInEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if strings.Contains(os.Getenv("GODEBUG"), "schedtrace=") {
		t.Skip("GODEBUG sets schedtrace in the test's environment")
	}
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
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
			if got := strings.Contains(godebug, runtimetune.SteadySchedtrace); got != c.steady {
				t.Errorf("process %d runs with GODEBUG %q; want %s there: %v", f.pid, godebug, runtimetune.SteadySchedtrace, c.steady)
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
