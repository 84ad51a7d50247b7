package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func overheadFixture(fanoutP99, directP99 time.Duration, fanoutRPC, haproxyRPC, idle float64) *OverheadResult {
	return &OverheadResult{
		Runs:       1,
		IdleRSSMiB: map[string]float64{targetFanout: idle, targetHAProxy: 9, targetLibrary: 3.25, targetFanoutTLS: 22},
		Order:      [][]string{{targetDirect, targetFanout, targetHAProxy}},
		Rows: []OverheadRow{
			{Target: targetDirect, Phase: "1k", Runs: 1, P99: directP99, CPUPer10k: math.NaN(), UserCPUPer10k: math.NaN(), ReqPerCPUSecond: math.NaN(), PeakRSSMiB: math.NaN(), ClientCPUPer10k: 0.5},
			{Target: targetLibrary, Phase: "1k", Runs: 1, P99: directP99 + 50*time.Microsecond, CPUPer10k: 0.25, UserCPUPer10k: math.NaN(), ReqPerCPUSecond: 40000, PeakRSSMiB: math.NaN(), ClientCPUPer10k: 0.75},
			{Target: targetFanoutTLS, Phase: "1k", Runs: 1, P99: fanoutP99 - 100*time.Microsecond, CPUPer10k: 0.9, UserCPUPer10k: 0.6, ReqPerCPUSecond: 11111, PeakRSSMiB: 25, ClientCPUPer10k: 0.6},
			{Target: targetFanout, Phase: "1k", Runs: 1, P99: fanoutP99},
			{Target: targetFanout, Phase: "saturation", Runs: 1, ReqPerCPUSecond: fanoutRPC},
			{Target: targetHAProxy, Phase: "saturation", Runs: 1, ReqPerCPUSecond: haproxyRPC},
			{Target: targetHAProxy, Phase: "1k", Runs: 1, P99: 1250 * time.Microsecond},
		},
	}
}

// footprintFixture has the two client-process rows: 100 watches, the
// library at 5 KiB heap and 8 KiB stacks each, direct at 3 and 8.
func footprintFixture() *FootprintResult {
	row := func(mode string, heapKiB uint64) footprintRow {
		return footprintRow{Mode: mode, Watches: 100, Before: memSnap{HeapInuse: 1 << 20, StackInuse: 1 << 20},
			After: memSnap{HeapInuse: 1<<20 + 100*heapKiB<<10, StackInuse: 1<<20 + 100*8<<10, Goroutines: 200}}
	}
	return &FootprintResult{Watches: 100, WatchInterval: 10 * time.Second, MemProfileRate: footprintRate,
		Rows: []footprintRow{row("client process, direct", 3), row("client process, library", 5)}}
}

func TestTargets(t *testing.T) {
	micro := func(allocs ...float64) *MicroResult {
		m := &MicroResult{}
		for _, a := range allocs {
			m.Benches = append(m.Benches, MicroBench{Name: "BenchmarkPick/x", AllocsPerOp: a})
		}
		// Not Pick: its allocations do not count.
		m.Benches = append(m.Benches, MicroBench{Name: "BenchmarkServeShort", AllocsPerOp: 30})
		return m
	}
	for _, tc := range []struct {
		name string
		r    Report
		want []string // statuses in Targets order
	}{
		{
			name: "all met",
			r: Report{
				Overhead:  overheadFixture(1200*time.Microsecond, 1000*time.Microsecond, 12000, 10000, 15),
				Scale:     &ScaleResult{WatchesOpen: 2000, PeakRSSMiB: 50},
				Micro:     micro(0, 0),
				Footprint: footprintFixture(),
			},
			want: []string{statusMet, statusMet, statusMet, statusMet, statusMet, statusMeasured, statusMet},
		},
		{
			name: "all missed",
			r: Report{
				Overhead: overheadFixture(1300*time.Microsecond, 1000*time.Microsecond, 7999, 10000, 20.1),
				Scale:    &ScaleResult{WatchesOpen: 2000, PeakRSSMiB: 96.1},
				Micro:    micro(0, 1),
			},
			want: []string{statusNotMet, statusNotMet, statusNotMet, statusNotMet, statusNotMet, statusNotMeasured, statusNotMet},
		},
		{
			name: "boundaries are met",
			r: Report{
				Overhead: overheadFixture(1250*time.Microsecond, 1000*time.Microsecond, 10000, 10000, 20),
				Scale:    &ScaleResult{WatchesOpen: 2000, PeakRSSMiB: 64},
				Micro:    micro(0),
			},
			want: []string{statusMet, statusMet, statusMet, statusMet, statusMet, statusNotMeasured, statusMet},
		},
		{
			name: "only the least acceptable values",
			r: Report{
				Overhead: overheadFixture(1250*time.Microsecond, 1000*time.Microsecond, 8000, 10000, 20),
				Scale:    &ScaleResult{WatchesOpen: 2000, PeakRSSMiB: 96},
			},
			want: []string{statusLeast, statusMet, statusMet, statusMet, statusLeast, statusNotMeasured, statusNotMeasured},
		},
		{
			name: "nothing measured",
			r:    Report{},
			want: []string{statusNotMeasured, statusNotMeasured, statusNotMeasured, statusNotMeasured, statusNotMeasured, statusNotMeasured, statusNotMeasured},
		},
		{
			name: "too few watches gives no verdict; NaN CPU is not measured",
			r: Report{
				Overhead: overheadFixture(1000*time.Microsecond, 1000*time.Microsecond, math.NaN(), 10000, 20),
				Scale:    &ScaleResult{WatchesOpen: 1999, PeakRSSMiB: 10},
			},
			want: []string{statusNotMeasured, statusMet, statusMet, statusMet, statusNotMeasured, statusNotMeasured, statusNotMeasured},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := Targets(&tc.r)
			if len(rows) != len(tc.want) {
				t.Fatalf("%d rows, want %d", len(rows), len(tc.want))
			}
			for i, row := range rows {
				if row.Status != tc.want[i] {
					t.Errorf("%s: %s (measured %s), want %s", row.Target, row.Status, row.Measured, tc.want[i])
				}
			}
		})
	}
}

func TestRender(t *testing.T) {
	r := &Report{
		Started:  time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC),
		Finished: time.Date(2026, 11, 30, 6, 20, 0, 0, time.UTC),
		Command:  "fanout-bench -quick", Via: "make bench BENCH_ARGS=-quick",
		Quick:    true,
		Machine:  Machine{CPUs: 2, CPUModel: "Test CPU", MemTotal: "4.0 GiB", Kernel: "Linux 6.1", Go: "go1.26", HAProxy: "HAProxy version 2.6.12", LoadAvg: "1.00 2.00 3.00"},
		Overhead: overheadFixture(1300*time.Microsecond, 1000*time.Microsecond, 6000, 10000, 21.5),
		RealAPI: &RealAPIResult{APIServers: []string{"https://a", "https://b", "https://c"}, Rate: 100, Duration: time.Second, Rows: []RealAPIRow{
			{Target: targetFanout, Runs: 1, Served: []int{30, 30, 40}, Sent: 100, P50: 2 * time.Millisecond, P99: 15 * time.Millisecond},
		}},
		ScaleTLS:     &ScaleResult{Target: targetFanoutTLS, Watches: 2000, WatchesOpen: 2000, WatchInterval: time.Second, Duration: 3 * time.Second, Elapsed: 3 * time.Second, CPUSeconds: 1.2, PeakRSSMiB: 45, WatchConns: 2, WatchDials: 51, RequestConns: 1},
		ScaleHAProxy: &ScaleResult{Target: targetHAProxy, WatchConns: 2000, WatchDials: 2000, RequestConns: 25, Watches: 2000, WatchesOpen: 2000, WatchInterval: time.Second, Duration: 3 * time.Second, Elapsed: 3 * time.Second, CPUSeconds: 0.3, PeakRSSMiB: 40, ListErr: "EOF"},
		Scale:        &ScaleResult{Target: targetFanout, Watches: 2000, WatchesOpen: 2000, WatchInterval: time.Second, Duration: 3 * time.Second, Elapsed: 3 * time.Second, CPUSeconds: 1.5, PeakRSSMiB: 70, ListBytes: 100 << 20, ListWant: 100 << 20, ListDuration: time.Second, ListPeakRSSMiB: 33.3},
		Micro:        &MicroResult{Commands: []string{"go test -bench x"}, Benches: []MicroBench{{Name: "BenchmarkPick/rr", Samples: 1, NsPerOp: 12.34, BytesPerOp: math.NaN(), AllocsPerOp: 0}}, ProfileTop: "flat flat% sum%"},
		Failures:     []string{"scale: something broke"},
		Footprint:    footprintFixture(),
	}
	r.Overhead.Profiles = []ProxyProfile{
		{Target: targetFanout, Commands: []string{"perf record -F 999 -p 42"}, Top: "    12.00%  fanout  [.] crypto/aes.gcmAesEnc"},
		{Target: targetHAProxy, Err: "no permission"},
	}
	md := Render(r)
	for _, want := range []string{
		"QUICK RUN",
		"Quick run: these verdicts come from a smoke run",
		"- Command: `make bench BENCH_ARGS=-quick`, which ran `fanout-bench -quick` in `e2e/`",
		"| CPUs (nproc) | 2 |", "| CPU model | Test CPU |", "| RAM | 4.0 GiB |", "| kernel | Linux 6.1 |", "| HAProxy | HAProxy version 2.6.12 |",
		"2026-11-30T06:00:00Z", "(20m0s)",
		"| fanout RSS ≤ 20 MiB idle | 21.5 MiB (HAProxy 9.0 MiB) | **not met** |",
		"| p99 added over direct ≤ 250 µs at 1k req/s | +300 µs (fanout 1300 µs, direct 1000 µs) | **not met** |",
		"fanout 6000, HAProxy 10000 (0.60×)",
		"| fanout peak RSS ≤ 64 MiB with 2000 watches + short requests (at least ≤ 96 MiB) | 70.0 MiB peak with 2000 watches open (HAProxy 40.0 MiB) | minimum met, goal not met |",
		"| the library's (client.New) memory per watch, in the client process | 5.0 KiB heap + 8.0 KiB stacks (client-go alone: 3.0 + 8.0 KiB) | measured |",
		"## 4. Footprint: one open watch, fanout and the library",
		"| client process, library | 0.0 → 0.0 | 0.0 | 0.0 KiB | 5.0 KiB | 8.0 KiB | 0.0 KiB | 0.0 | 2.00 |",
		"## 5. Micro benchmarks",
		"| fanout | 1 | 100 | 0 | 0 | 2000 µs | 15.0 ms | 30 (30.0 %) | 30 (30.0 %) | 40 (40.0 %) |",
		"| metric | fanout | fanout-tls | haproxy |",
		"| CPU during the phase | 1.50 s in 3s (50 % of one core) | 1.20 s in 3s (40 % of one core) | 0.30 s in 3s (10 % of one core) |",
		"| peak RSS (VmHWM) | 70.0 MiB | 45.0 MiB | 40.0 MiB |",
		"| peak RSS (VmHWM) | 33.3 MiB | 0.0 MiB | 0.0 MiB |",
		"| error | none | none | `EOF` |",
		"| client connections open with the watches open (dialed) | 0 (0) | 2 (51) | 2000 (2000) |",
		"| client connections dialed for the short requests | 0 | 1 | 25 |",
		"| path | load | runs | requests (all runs) | errors (all runs) | throughput (req/s) | p50 | p99 | p99.9 | proxy CPU s / 10k req | of it user | req / CPU-s | peak RSS (MiB) | load generator CPU s / 10k req |",
		"| library | 1k | 1 | 0 | 0 | 0 | 0 µs | 1050 µs | 0 µs | 0.250 | — | 40000 | — | 0.750 |",
		"| fanout-tls | 1k | 1 | 0 | 0 | 0 | 0 µs | 1200 µs | 0 µs | 0.900 | 0.600 | 11111 | 25.0 | 0.600 |",
		" fanout 21.5 MiB; fanout-tls 22.0 MiB; haproxy 9.0 MiB; library 3.2 MiB;",
		"| BenchmarkPick/rr | 1 | 12.3 | — | 0 |",
		"flat flat% sum%",
		"- scale: something broke",
		"run 1: direct → fanout → haproxy;",
		"### Where fanout spends its CPU at saturation",
		"perf record -F 999 -p 42",
		"    12.00%  fanout  [.] crypto/aes.gcmAesEnc",
		"perf failed: `no permission`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// A direct row has no proxy: its proxy columns must say so, not 0.
	if !strings.Contains(md, "| direct | 1k | 1 | 0 | 0 | 0 | 0 µs | 1000 µs | 0 µs | — | — | — | — | 0.500 |\n") {
		t.Errorf("direct row does not show — for proxy columns:\n%s", md)
	}
	r.Quick = false
	if full := Render(r); strings.Contains(full, "QUICK RUN") || strings.Contains(full, "Quick run") {
		t.Error("a full run is labelled quick")
	}
}

func TestFmtDur(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{250 * time.Microsecond, "250 µs"},
		{9999 * time.Microsecond, "9999 µs"},
		{15 * time.Millisecond, "15.0 ms"},
		{1966 * time.Millisecond, "1.97 s"},
		{12 * time.Second, "12.00 s"},
	} {
		if got := fmtDur(tc.d); got != tc.want {
			t.Errorf("fmtDur(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestPerfTop(t *testing.T) {
	report := `# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 1K of event 'cpu-clock:ppp'
#
# Overhead  Shared Object  Symbol
# ........  .............  ......
#
     5.00%  fanout         [.] runtime.mallocgc
     8.00%  [kernel]       [k] _raw_spin_unlock_irqrestore         -      -
    12.00%  fanout         [.] crypto/aes.gcmAesEnc                -      -


#
# (Tip: use --percent-limit)
#
`
	if got, want := PerfTop(report, 2), "    12.00%  fanout         [.] crypto/aes.gcmAesEnc\n     8.00%  [kernel]       [k] _raw_spin_unlock_irqrestore"; got != want {
		t.Errorf("PerfTop(2) =\n%s\nwant\n%s", got, want)
	}
	if got := PerfTop(report, 10); strings.Count(got, "\n") != 2 || strings.Contains(got, "#") {
		t.Errorf("PerfTop(10) =\n%s", got)
	}
}

func TestPerfByPackage(t *testing.T) {
	report := `# header
#
    10.00%  fanout             [.] runtime.mallocgc
     5.00%  fanout             [.] runtime.(*mspan).writeHeapBitsSmall
     7.50%  fanout             [.] net/textproto.CanonicalMIMEHeaderKey
     2.50%  fanout             [.] net/http.(*Transport).roundTrip
     4.00%  fanout             [.] github.com/fanout-dev/fanout/components/proxy.(*Handler).ServeHTTP
     1.00%  fanout             [.] golang.org/x/net/http2.(*Framer).ReadFrame
     3.00%  fanout             [.] aeshashbody
    20.00%  [kernel.kallsyms]  [k] finish_task_switch.isra.0
     6.00%  libc.so.6          [.] _int_malloc
`
	want := strings.Join([]string{
		"  20.00%  kernel",
		"  15.00%  runtime",
		"   7.50%  net/textproto",
		"   6.00%  libc.so.6",
		"   4.00%  github.com/fanout-dev/fanout/components/proxy",
		"   3.00%  fanout",
		"   2.50%  net/http",
		"   1.00%  golang.org/x/net/http2",
	}, "\n")
	if got := PerfByPackage(report, 10); got != want {
		t.Errorf("PerfByPackage =\n%s\nwant\n%s", got, want)
	}
	if got := PerfByPackage(report, 2); strings.Count(got, "\n") != 1 {
		t.Errorf("PerfByPackage(2) =\n%s", got)
	}
}

// TestAggregateOverheadLibrary checks the library's CPU: the load
// generator's own CPU per 10k requests beyond direct's in the same run and
// phase, the median of those differences, and none without direct.
func TestAggregateOverheadLibrary(t *testing.T) {
	phases := []Phase{{Name: "1k", Rate: 1000}, {Name: "saturation"}}
	m := func(target, phase string, run, ok int, proxyCPU, self float64) PhaseMeasure {
		return PhaseMeasure{Target: target, Phase: phase, Run: run, Load: LoadResult{OK: ok, Sent: ok, Elapsed: time.Second},
			CPUSeconds: proxyCPU, UserCPUSeconds: proxyCPU * 0.75, PeakRSSKiB: math.NaN(), SelfCPUSeconds: self}
	}
	nan := math.NaN()
	ms := []PhaseMeasure{
		// Run 0: direct 1.0 s / 10k, library 1.5 s / 10k: +0.5.
		m(targetDirect, "1k", 0, 10000, nan, 1.0),
		m(targetLibrary, "1k", 0, 10000, nan, 1.5),
		// Run 1: direct 2.0 / 10k, library 2.0 / 5k = 4.0 / 10k: +2.0.
		// Pairing across runs would give other numbers.
		m(targetDirect, "1k", 1, 10000, nan, 2.0),
		m(targetLibrary, "1k", 1, 5000, nan, 2.0),
		// Run 2: direct 3.0 / 10k, library 3.25 / 10k: +0.25.
		m(targetDirect, "1k", 2, 20000, nan, 6.0),
		m(targetLibrary, "1k", 2, 20000, nan, 6.5),
		// Saturation of run 0 only.
		m(targetDirect, "saturation", 0, 40000, nan, 4.0),
		m(targetLibrary, "saturation", 0, 40000, nan, 6.0),
		// A proxy keeps its own CPU.
		m(targetFanoutTLS, "1k", 0, 10000, 3.0, 1.2),
	}
	rows := AggregateOverhead(ms, phases, []string{targetDirect, targetLibrary, targetFanoutTLS})
	get := func(target, phase string) OverheadRow {
		t.Helper()
		for _, r := range rows {
			if r.Target == target && r.Phase == phase {
				return r
			}
		}
		t.Fatalf("no row %s %s in %+v", target, phase, rows)
		return OverheadRow{}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if r := get(targetLibrary, "1k"); !near(r.CPUPer10k, 0.5) || !near(r.ReqPerCPUSecond, 20000) || !near(r.ClientCPUPer10k, 3.25) {
		t.Errorf("library 1k: CPU/10k %v, req/CPU-s %v, load generator CPU/10k %v; want 0.5 (median of +0.5, +2, +0.25), 20000, 3.25", r.CPUPer10k, r.ReqPerCPUSecond, r.ClientCPUPer10k)
	}
	if r := get(targetLibrary, "saturation"); !near(r.CPUPer10k, 0.5) {
		t.Errorf("library saturation: CPU/10k %v, want 0.5", r.CPUPer10k)
	}
	if r := get(targetDirect, "1k"); !math.IsNaN(r.CPUPer10k) || !near(r.ClientCPUPer10k, 2.0) {
		t.Errorf("direct 1k: CPU/10k %v (want NaN: no proxy), load generator %v (want 2.0)", r.CPUPer10k, r.ClientCPUPer10k)
	}
	if r := get(targetFanoutTLS, "1k"); !near(r.CPUPer10k, 3.0) || !near(r.UserCPUPer10k, 2.25) || !near(r.ClientCPUPer10k, 1.2) {
		t.Errorf("fanout-tls 1k: CPU/10k %v (user %v), load generator %v; want 3.0 (2.25) and 1.2", r.CPUPer10k, r.UserCPUPer10k, r.ClientCPUPer10k)
	}
	// The library's CPU is a difference of totals: no user part.
	if r := get(targetLibrary, "1k"); !math.IsNaN(r.UserCPUPer10k) {
		t.Errorf("library 1k: user CPU/10k %v, want NaN", r.UserCPUPer10k)
	}
	// Without direct there is nothing to subtract.
	var noDirect []PhaseMeasure
	for _, x := range ms {
		if x.Target != targetDirect {
			noDirect = append(noDirect, x)
		}
	}
	rows = AggregateOverhead(noDirect, phases, []string{targetLibrary})
	if r := get(targetLibrary, "1k"); !math.IsNaN(r.CPUPer10k) || !math.IsNaN(r.ReqPerCPUSecond) {
		t.Errorf("library without direct: CPU/10k %v, req/CPU-s %v; want NaN", r.CPUPer10k, r.ReqPerCPUSecond)
	}
}
