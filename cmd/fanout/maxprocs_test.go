package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testpki"
)

func TestApplyMaxProcs(t *testing.T) {
	for _, c := range []struct {
		name, spec, env string
		want            maxProcs
		set             int // the GOMAXPROCS set; 0: only read
		wantErr         bool
	}{
		{name: "auto keeps the runtime's", spec: "auto", want: maxProcs{4, "runtime"}},
		{name: "auto with the environment", spec: "auto", env: "4", want: maxProcs{4, "GOMAXPROCS"}},
		{name: "a number", spec: "1", want: maxProcs{1, "flag"}, set: 1},
		{name: "a number wins over the environment", spec: " 3 ", env: "4", want: maxProcs{3, "flag"}, set: 3},
		{name: "zero", spec: "0", wantErr: true},
		{name: "not a number", spec: "two", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			current, set := 4, 0
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

// TestMaxProcsInEffect runs the binary with the default flags and reads
// the GOMAXPROCS in effect from its metrics: Go's own choice, which the
// test binary's runtime made the same way.
func TestMaxProcsInEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildFanout(t)
	ca := testpki.NewCA(t)
	upstream := httptest.NewUnstartedServer(http.NotFoundHandler())
	upstream.EnableHTTP2 = true
	upstream.TLS = ca.ServerTLSConfig(ca.Serving("kubernetes", "127.0.0.1"), tls.RequireAndVerifyClientCert)
	upstream.StartTLS()
	defer upstream.Close()
	f := startFootprintFanout(t, bin, ca, upstream.URL)
	resp, err := http.Get(f.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := fmt.Sprintf("go_sched_gomaxprocs_threads %d\n", runtime.GOMAXPROCS(0))
	if !strings.Contains(string(body), want) {
		got := "no go_sched_gomaxprocs_threads sample"
		if i := strings.Index(string(body), "\ngo_sched_gomaxprocs_threads "); i >= 0 {
			got, _, _ = strings.Cut(string(body[i+1:]), "\n")
		}
		t.Errorf("/metrics has %q, want %q", got, strings.TrimSpace(want))
	}
}
