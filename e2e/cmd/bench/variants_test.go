package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseVariants(t *testing.T) {
	targets, args, err := parseVariants(" steady=--sysmon=steady, two=--max-procs 2 --gc-headroom=16Mi ,")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(targets, " "); got != "fanout+steady fanout+two" {
		t.Errorf("targets %q, want fanout+steady fanout+two", got)
	}
	if got := strings.Join(args["fanout+two"], "|"); got != "--max-procs|2|--gc-headroom=16Mi" {
		t.Errorf("fanout+two's flags %q", got)
	}
	if got := strings.Join(args["fanout+steady"], "|"); got != "--sysmon=steady" {
		t.Errorf("fanout+steady's flags %q", got)
	}
	for _, bad := range []string{"steady", "=--sysmon=steady", "Steady=--x", "a b=--x", "x=", "x=sysmon", "x=--a,x=--b"} {
		if _, _, err := parseVariants(bad); err == nil || !strings.Contains(err.Error(), "-fanout-variants") {
			t.Errorf("parseVariants(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}

// TestVariantsFlag checks that -fanout-variants adds its paths to the
// ones measured, rotated with them, and that -saturation=false leaves
// the saturation phase out.
func TestVariantsFlag(t *testing.T) {
	o, _, _, _, err := parseFlags([]string{"-targets", "fanout", "-fanout-variants", "steady=--sysmon=steady,adaptive=--max-procs=adaptive", "-rates", "1000", "-saturation=false"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.Targets, " "); got != "fanout fanout+steady fanout+adaptive" {
		t.Errorf("targets %q", got)
	}
	if !slices.Equal(o.VariantArgs["fanout+adaptive"], []string{"--max-procs=adaptive"}) {
		t.Errorf("variant flags %q", o.VariantArgs)
	}
	if len(o.Phases) != 1 || o.Phases[0].Name != "1k" {
		t.Errorf("phases %+v, want 1k alone", o.Phases)
	}
	if got := strings.Join(rotated(o.Targets, 1), " "); got != "fanout+steady fanout+adaptive fanout" {
		t.Errorf("run 2's order %q", got)
	}
	o, _, _, _, err = parseFlags([]string{"-rates", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Phases) != 2 || len(o.VariantArgs) != 0 || len(o.Targets) != len(allTargets) {
		t.Errorf("defaults: phases %+v, variants %v, targets %v", o.Phases, o.VariantArgs, o.Targets)
	}
	if _, _, _, _, err := parseFlags([]string{"-rates", "", "-saturation=false"}); err == nil {
		t.Error("no phase at all accepted")
	}
}

// TestRenderVariants renders three runs of fanout and one variant: the
// medians, their ranges and the differences paired by run.
func TestRenderVariants(t *testing.T) {
	m := func(target string, run int, cpu float64, p99 time.Duration) PhaseMeasure {
		return PhaseMeasure{Target: target, Phase: "1k", Run: run, Load: LoadResult{Sent: 10000, OK: 10000}, Lat: LatencySummary{P99: p99}, CPUSeconds: cpu}
	}
	o := &OverheadResult{
		Runs:        3,
		VariantArgs: map[string][]string{"fanout+steady": {"--sysmon=steady"}},
		Rows:        []OverheadRow{{Target: targetFanout, Phase: "1k"}, {Target: "fanout+steady", Phase: "1k"}},
		Measures: []PhaseMeasure{
			m(targetFanout, 0, 2.0, 2*time.Millisecond), m("fanout+steady", 0, 1.5, 3*time.Millisecond),
			m(targetFanout, 1, 3.0, 2*time.Millisecond), m("fanout+steady", 1, 3.2, 2*time.Millisecond),
			m(targetFanout, 2, 2.5, 4*time.Millisecond), m("fanout+steady", 2, 2.0, 1*time.Millisecond),
			{Target: targetHAProxy, Phase: "1k", Run: 0, CPUSeconds: math.NaN()},
		},
	}
	var b strings.Builder
	renderVariants(&b, o)
	md := b.String()
	for _, want := range []string{
		"| fanout | (as built) | 1k | 3 | 2.500 [2.000, 3.000] | — | — | 2000 µs [2000 µs, 4000 µs] |",
		"| fanout+steady | `--sysmon=steady` | 1k | 3 | 2.000 [1.500, 3.200] | -0.500 [-0.500, +0.200] | 2 of 3 | 2000 µs [1000 µs, 3000 µs] |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	b.Reset()
	o.VariantArgs = nil
	renderVariants(&b, o)
	if b.Len() != 0 {
		t.Errorf("a run without variants got a variants table:\n%s", b.String())
	}
}
