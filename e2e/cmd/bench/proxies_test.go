package main

import (
	"strings"
	"testing"
	"time"
)

func TestHAProxyConfig(t *testing.T) {
	cfg, err := HAProxyConfig{
		Listen:    "127.0.0.1:7080",
		Servers:   []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"},
		CAFile:    "/pki/ca.crt",
		ClientPEM: "/pki/client.pem",
	}.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"mode http",
		"bind 127.0.0.1:7080\n",
		"balance roundrobin",
		"option httpchk GET /readyz",
		"http-reuse always",
		"default-server check inter 2s ssl verify required ca-file /pki/ca.crt crt /pki/client.pem alpn h2 check-alpn http/1.1\n",
		"server apiserver0 10.0.0.1:6443\n",
		"server apiserver1 10.0.0.2:6443\n",
		"server apiserver2 10.0.0.3:6443\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	// The frontend is plain HTTP: no ssl on the bind line.
	for _, line := range strings.Split(cfg, "\n") {
		if strings.Contains(line, "bind ") && strings.Contains(line, "ssl") {
			t.Errorf("frontend must be plain HTTP: %q", line)
		}
	}
}

func TestRotated(t *testing.T) {
	ts := []string{"a", "b", "c"}
	for run, want := range []string{"a b c", "b c a", "c a b", "a b c"} {
		if got := strings.Join(rotated(ts, run), " "); got != want {
			t.Errorf("rotated(run %d) = %q, want %q", run, got, want)
		}
	}
}

func TestParsePhases(t *testing.T) {
	ps, err := parsePhases("1000, 5000,250")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "1k 5k 250 saturation" || ps[3].Rate != 0 || ps[1].Rate != 5000 {
		t.Errorf("parsePhases = %+v", ps)
	}
	for _, bad := range []string{"x", "-5", "0"} {
		if _, err := parsePhases(bad); err == nil {
			t.Errorf("parsePhases(%q) accepted", bad)
		}
	}
}

func TestQuickShortensOnlyWhatWasNotSet(t *testing.T) {
	o, _, _, _, err := parseFlags([]string{"-quick", "-runs", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Quick || o.Runs != 2 || o.PhaseDuration.Seconds() != 3 || o.MicroCount != 1 {
		t.Errorf("quick options = %+v", o)
	}
	o, _, _, _, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Quick || o.Runs != 5 || o.PhaseDuration.Seconds() != 20 || len(o.Targets) != 5 || len(o.Sections) != 5 || o.FootprintWatches != 500 {
		t.Errorf("default options = %+v", o)
	}
	if _, _, _, _, err := parseFlags([]string{"-sections", "nope"}); err == nil {
		t.Error("unknown section accepted")
	}
}

func TestTargetsFlag(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    string
		wantErr bool
	}{
		{arg: "direct,fanout,haproxy,library,fanout-tls", want: "direct fanout haproxy library fanout-tls"},
		{arg: "library,direct", want: "library direct"},
		{arg: "fanout-tls", want: "fanout-tls"},
		{arg: "fanout,tls", wantErr: true},
		{arg: "librar", wantErr: true},
	} {
		o, _, _, _, err := parseFlags([]string{"-targets", tc.arg})
		if tc.wantErr {
			if err == nil {
				t.Errorf("-targets %s accepted: %v", tc.arg, o.Targets)
			}
			continue
		}
		if err != nil {
			t.Errorf("-targets %s: %v", tc.arg, err)
			continue
		}
		if got := strings.Join(o.Targets, " "); got != tc.want {
			t.Errorf("-targets %s = %q, want %q", tc.arg, got, tc.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	full, _, _, _, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	quick, _, _, _, err := parseFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	f, q := Estimate(full), Estimate(quick)
	t.Logf("estimates: full %s, quick %s", f, q)
	// 5 runs × 5 paths × 3 phases × 20 s of overhead alone is 25 min.
	if f < 25*time.Minute || f > 60*time.Minute {
		t.Errorf("full run estimate %s, want between 25 and 60 min", f)
	}
	// Fewer paths, shorter run: the perf and scale phases of the proxies
	// left out are not counted.
	three, _, _, _, err := parseFlags([]string{"-targets", "direct,fanout,haproxy"})
	if err != nil {
		t.Fatal(err)
	}
	if e3 := Estimate(three); e3 >= f || f-e3 < 2*5*3*20*time.Second {
		t.Errorf("estimate with three paths %s, all five %s: want at least the 10 min of overhead phases less", e3, f)
	}
	if q >= f/5 {
		t.Errorf("quick estimate %s is not much shorter than the full %s", q, f)
	}
	// With two variants the footprint section measures fanout and both in
	// each of the 10 runs: 30 processes, each waiting two settles at least.
	alone, _, _, _, err := parseFlags([]string{"-sections", "footprint", "-runs", "10"})
	if err != nil {
		t.Fatal(err)
	}
	two, _, _, _, err := parseFlags([]string{"-sections", "footprint", "-runs", "10", "-fanout-variants", "a=--x,b=--y"})
	if err != nil {
		t.Fatal(err)
	}
	if d := Estimate(two) - Estimate(alone); d < 30*2*footprintSettle {
		t.Errorf("two variants add %s to the footprint section's estimate, want at least %s", d, 30*2*footprintSettle)
	}
}
