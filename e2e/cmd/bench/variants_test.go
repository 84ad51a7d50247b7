package main

import (
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

// TestRenderVariants renders three runs of fanout and two variants: each
// figure's medians and ranges, the differences paired by run (the
// footprint rounds are listed in rotated order, so pairing by position
// would differ), the share by which fanout did better, and the 15% rule
// read from (b) and (d)'s heap and stacks only.
func TestRenderVariants(t *testing.T) {
	const std, steady = "fanout+std", "fanout+steady"
	var ms []PhaseMeasure
	var idle []roundValue
	var rounds []footprintRound
	add := func(target string, run int, cpu1k float64, p99 time.Duration, satOK int, memKiB, rssKiB, idleMiB float64) {
		ms = append(ms,
			PhaseMeasure{Target: target, Phase: "1k", Run: run, Load: LoadResult{Sent: 10000, OK: 10000}, Lat: LatencySummary{P99: p99}, CPUSeconds: cpu1k},
			PhaseMeasure{Target: target, Phase: "saturation", Run: run, Load: LoadResult{Sent: satOK, OK: satOK}, CPUSeconds: 1})
		idle = append(idle, roundValue{Target: target, Run: run, V: idleMiB})
		// 100 watches, 4 KiB of stacks each, the rest heap.
		rounds = append(rounds, footprintRound{Target: target, Run: run, Row: footprintRow{Mode: "fanout h1", Watches: 100,
			Before: memSnap{RSSKiB: 1000},
			After:  memSnap{RSSKiB: 1000 + uint64(rssKiB*100), HeapInuse: uint64((memKiB - 4) * 102400), StackInuse: 4 * 102400}}})
	}
	for run, order := range [][]string{{targetFanout, std, steady}, {std, steady, targetFanout}, {steady, targetFanout, std}} {
		for _, target := range order {
			switch target {
			case targetFanout:
				add(target, run, []float64{2.0, 3.0, 2.5}[run], []time.Duration{2, 2, 4}[run]*time.Millisecond, []int{10000, 12000, 11000}[run], []float64{10, 11, 12}[run], []float64{20, 22, 24}[run], []float64{18.9, 19.0, 19.1}[run])
			case std:
				add(target, run, []float64{2.5, 3.6, 2.9}[run], []time.Duration{3, 2, 1}[run]*time.Millisecond, []int{9000, 12000, 10000}[run], []float64{11, 11, 13}[run], 30, 19)
			case steady:
				add(target, run, []float64{1.5, 3.2, 2.0}[run], 2*time.Millisecond, []int{11000, 13000, 12100}[run], []float64{9, 11, 12}[run], 20, 19)
			}
		}
	}
	ms = append(ms, PhaseMeasure{Target: targetHAProxy, Phase: "1k", Run: 0, Load: LoadResult{Sent: 10000, OK: 10000}, CPUSeconds: 0.123})
	var rows []OverheadRow
	for _, target := range []string{targetFanout, targetHAProxy, std, steady} {
		rows = append(rows, OverheadRow{Target: target, Phase: "1k", Rate: 1000}, OverheadRow{Target: target, Phase: "saturation"})
	}
	r := &Report{
		Variants:    []string{std, steady},
		VariantArgs: map[string][]string{std: {"--upstream-http2=std"}, steady: {"--sysmon=steady"}},
		Overhead:    &OverheadResult{Runs: 3, Rows: rows, Measures: ms, IdleRounds: idle},
		Footprint:   &FootprintResult{Watches: 100, Rounds: rounds},
	}
	var b strings.Builder
	renderVariants(&b, r)
	md := b.String()
	for _, want := range []string{
		"**fanout+std** `--upstream-http2=std`; **fanout+steady** `--sysmon=steady`;",
		"| (a) requests per CPU-second at saturation | fanout | 3 | 11000 [10000, 12000] |  |  |  |",
		"|  | fanout+std | 3 | 10000 [9000, 12000] | -1000 [-1000, +0] | 0 of 3 | 10.0% |",
		"|  | fanout+steady | 3 | 12100 [11000, 13000] | +1000 [+1000, +1100] | 3 of 3 | -9.1% |",
		"| (b) proxy CPU s / 10k requests at 1k | fanout | 3 | 2.500 [2.000, 3.000] |  |  |  |",
		"|  | fanout+std | 3 | 2.900 [2.500, 3.600] | +0.500 [+0.400, +0.600] | 0 of 3 | 16.7% |",
		"|  | fanout+steady | 3 | 2.000 [1.500, 3.200] | -0.500 [-0.500, +0.200] | 2 of 3 | -25.0% |",
		"| (c) p99 at 1k | fanout | 3 | 2000 µs [2000 µs, 4000 µs] |  |  |  |",
		"|  | fanout+std | 3 | 2000 µs [1000 µs, 3000 µs] | +0 µs [−3000 µs, +1000 µs] | 1 of 3 | 0.0% |",
		"| (d) heap and stacks per open watch (KiB) | fanout | 3 | 11.00 [10.00, 12.00] |  |  |  |",
		"|  | fanout+std | 3 | 11.00 [11.00, 13.00] | +1.00 [+0.00, +1.00] | 0 of 3 | 7.7% |",
		"|  | fanout+steady | 3 | 11.00 [9.00, 12.00] | +0.00 [-1.00, +0.00] | 1 of 3 | 0.0% |",
		"| (d) RSS per open watch (KiB) | fanout | 3 | 22.0 [20.0, 24.0] |  |  |  |",
		"|  | fanout+std | 3 | 30.0 [30.0, 30.0] | +8.0 [+6.0, +10.0] | 0 of 3 | 26.7% |",
		"| (e) idle RSS (MiB) | fanout | 3 | 19.0 [18.9, 19.1] |  |  |  |",
		// RSS per watch is 26.7% but not a figure of the rule.
		"- fanout+std: fanout better by 16.7% on (b) proxy CPU s / 10k requests at 1k, by 7.7% on (d) heap and stacks per open watch (KiB): **at least 15% on (b) proxy CPU s / 10k requests at 1k**.",
		"- fanout+steady: fanout better by -25.0% on (b) proxy CPU s / 10k requests at 1k, by 0.0% on (d) heap and stacks per open watch (KiB): **under 15% on each**.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, targetHAProxy) || strings.Contains(md, "Not measured") {
		t.Errorf("a path that is no variant, or a figure reported missing:\n%s", md)
	}

	// Without the footprint section and the saturation phase.
	r.Footprint = nil
	r.Overhead.Rows = slices.DeleteFunc(r.Overhead.Rows, func(row OverheadRow) bool { return row.Rate == 0 })
	b.Reset()
	renderVariants(&b, r)
	md = b.String()
	for _, want := range []string{
		"Not measured in this run: (a) needs the overhead section's saturation phase; (d) needs the footprint section.",
		"- fanout+std: fanout better by 16.7% on (b) proxy CPU s / 10k requests at 1k: **at least 15% on (b) proxy CPU s / 10k requests at 1k**.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("without (a) and (d), the table lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| (a) requests") || strings.Contains(md, "| (d) heap") {
		t.Errorf("rows for figures not measured:\n%s", md)
	}

	b.Reset()
	r.Variants = nil
	renderVariants(&b, r)
	if b.Len() != 0 {
		t.Errorf("a run without variants got a variants table:\n%s", b.String())
	}
}
