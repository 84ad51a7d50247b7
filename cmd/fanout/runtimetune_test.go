package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/runtimetune"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestMaxProcsInEffect runs the binary and reads the GOMAXPROCS in effect
// from its metrics: Go's own choice, which the test binary's runtime made
// the same way.
func TestMaxProcsInEffect(t *testing.T) {
	f := startIdle(t)
	want := fmt.Sprintf("go_sched_gomaxprocs_threads %d", runtime.GOMAXPROCS(0))
	got := "no go_sched_gomaxprocs_threads sample"
	body := scrape(t, f.admin)
	if i := strings.Index(body, "\ngo_sched_gomaxprocs_threads "); i >= 0 {
		got, _, _ = strings.Cut(body[i+1:], "\n")
	}
	if got != want {
		t.Errorf("/metrics has %q, want %q", got, want)
	}
}

// startIdle builds the binary and starts it, with extra flags, in front of
// an upstream that answers 404. It skips the test under -short.
func startIdle(t *testing.T, extra ...string) *footprintFanout {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
	upstream := tlsUpstream(t, ca, http.NotFoundHandler())
	return startFootprintFanout(t, bin, ca, upstream.URL, extra...)
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

// TestDefaultRunsAsStarted runs the binary with the default flags: it
// keeps the environment it was started with (it did not execute itself
// again with a GODEBUG of its own) and says so in /metrics.
func TestDefaultRunsAsStarted(t *testing.T) {
	f := startIdle(t)
	want, wantSet := os.LookupEnv("GODEBUG")
	got, set := processEnv(t, f.pid, "GODEBUG")
	if got != want || set != wantSet {
		t.Errorf("process %d runs with GODEBUG %q (set: %v), started with %q (set: %v): it executed itself again", f.pid, got, set, want, wantSet)
	}
	if body := scrape(t, f.admin); !strings.Contains(body, "\nfanout_sysmon_steady 0\n") {
		t.Errorf("/metrics lacks fanout_sysmon_steady 0")
	}
}

// processEnv is the value of the environment variable name of process
// pid, as the process runs now, and whether it is set.
func processEnv(t *testing.T, pid int, name string) (string, bool) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(raw), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestSysmonInEffect runs the binary with --sysmon steady, the opt-in:
// it has executed itself again, with the same process ID, with the
// schedtrace that keeps sysmon from its deep sleep, and says so in
// /metrics. The default is TestDefaultRunsAsStarted's.
func TestSysmonInEffect(t *testing.T) {
	if strings.Contains(os.Getenv("GODEBUG"), "schedtrace=") {
		t.Skip("GODEBUG sets schedtrace in the test's environment")
	}
	f := startIdle(t, "--sysmon", "steady")
	if godebug, _ := processEnv(t, f.pid, "GODEBUG"); !strings.Contains(godebug, runtimetune.SteadySchedtrace) {
		t.Errorf("process %d runs with GODEBUG %q; want %s there", f.pid, godebug, runtimetune.SteadySchedtrace)
	}
	if body := scrape(t, f.admin); !strings.Contains(body, "\nfanout_sysmon_steady 1\n") {
		t.Errorf("/metrics lacks fanout_sysmon_steady 1")
	}
}
