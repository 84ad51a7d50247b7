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

	"github.com/fanout-dev/fanout/internal/testpki"
)

func TestApplyMaxProcs(t *testing.T) {
	for _, c := range []struct {
		name, spec, env string
		want            maxProcs
		set             int // the GOMAXPROCS set; 0: only read
		current         int // the runtime's GOMAXPROCS; 0: 4
		wantErr         bool
	}{
		{name: "adaptive tunes up to the runtime's", spec: "adaptive", want: maxProcs{4, "runtime", true}},
		{name: "adaptive is fixed by the environment", spec: "adaptive", env: "4", want: maxProcs{4, "GOMAXPROCS", false}},
		{name: "adaptive with one CPU has nothing to tune", spec: "adaptive", current: 1, want: maxProcs{1, "runtime", false}},
		{name: "auto keeps the runtime's", spec: "auto", want: maxProcs{4, "runtime", false}},
		{name: "auto with the environment", spec: "auto", env: "4", want: maxProcs{4, "GOMAXPROCS", false}},
		{name: "a number", spec: "1", want: maxProcs{1, "flag", false}, set: 1},
		{name: "a number wins over the environment", spec: " 3 ", env: "4", want: maxProcs{3, "flag", false}, set: 3},
		{name: "zero", spec: "0", wantErr: true},
		{name: "not a number", spec: "two", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			current, set := 4, 0
			if c.current > 0 {
				current = c.current
			}
			got, err := applyMaxProcs(c.spec, c.env, func(n int) int {
				prev := current
				if n > 0 {
					current, set = n, n
				}
				return prev
			})
			if c.wantErr {
				if err == nil {
					t.Fatalf("applyMaxProcs(%q) = %+v, want an error", c.spec, got)
				}
				if set != 0 {
					t.Errorf("GOMAXPROCS set to %d on bad input", set)
				}
				return
			}
			if err != nil || got != c.want || set != c.set {
				t.Errorf("applyMaxProcs(%q, env %q) = %+v, %v, set %d; want %+v, set %d", c.spec, c.env, got, err, set, c.want, c.set)
			}
		})
	}
}

// TestMaxProcsInEffect runs the binary and reads the GOMAXPROCS in effect
// from its metrics. With --max-procs auto it is Go's own choice, which the
// test binary's runtime made the same way. With the default (adaptive) an
// idle sidecar settles on one P; it may move up while it starts, so the
// test waits for that.
func TestMaxProcsInEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildFanout(t)
	ca := testpki.NewCA(t)
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
		{"auto", []string{"--max-procs", "auto"}, runtimes},
		{"adaptive-default-idle", nil, idle}, // no commas: the name is in the kubeconfig's flow-style paths
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
