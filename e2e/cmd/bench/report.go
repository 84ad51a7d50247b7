package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is everything docs/benchmarks.md shows. Render turns it into
// Markdown; nothing in it is typed by hand.
type Report struct {
	Started  time.Time
	Finished time.Time
	// Command is how the tool was run; Via how that was started (make
	// bench), if known.
	Command, Via string
	// Estimate is how long the run was expected to take.
	Estimate time.Duration
	Quick    bool
	Machine  Machine
	Settings []string

	Micro    *MicroResult
	Overhead *OverheadResult
	RealAPI  *RealAPIResult
	// Scale is fanout's; ScaleTLS fanout --listen-tls's and ScaleHAProxy
	// HAProxy's under the same load, for comparison.
	Scale, ScaleTLS, ScaleHAProxy *ScaleResult
	// Footprint is what one open watch costs fanout and the library.
	Footprint *FootprintResult
	// CostBalance is each apiserver's CPU under a mixed GET/LIST workload.
	CostBalance *CostBalanceResult
	// Variants are the -fanout-variants paths in the order given, and
	// VariantArgs the extra flags of each: the variants' table compares
	// them with fanout as built.
	Variants    []string
	VariantArgs map[string][]string
	// Failures are sections that could not be measured, with why.
	Failures []string
}

// Target goals, from issue 19 (footprint) and the project's goals. Where
// the issue names a least acceptable value beside the goal, a result
// between the two is "minimum met".
const (
	goalIdleRSSMiB     = 20
	goalWatchRSSMiB    = 64
	leastWatchRSSMiB   = 96
	goalWatches        = 2000
	goalCPURatio       = 1.0
	leastCPURatio      = 0.8
	goalAddedP99       = 250 * time.Microsecond
	goalAddedP99Phase  = "1k"
	goalThroughputPhse = "saturation"
)

// TargetRow is one line of the Targets table.
type TargetRow struct {
	Target   string
	Measured string
	Status   string // met, minimum met, not met, measured, not measured
}

const (
	statusMet         = "met"
	statusLeast       = "minimum met, goal not met"
	statusNotMet      = "**not met**"
	statusNotMeasured = "not measured"
	statusMeasured    = "measured"
)

func metStatus(ok bool) string {
	if ok {
		return statusMet
	}
	return statusNotMet
}

// graded is met when the goal holds, minimum met when only the least
// acceptable value does, not met otherwise.
func graded(goal, least bool) string {
	switch {
	case goal:
		return statusMet
	case least:
		return statusLeast
	}
	return statusNotMet
}

// Targets computes the Targets table from the measured numbers.
func Targets(r *Report) []TargetRow {
	var rows []TargetRow

	// 1. Requests per CPU second against HAProxy's, at saturation.
	row := TargetRow{Target: fmt.Sprintf("fanout's requests per CPU-second ≥ %.1f× HAProxy's at saturation (at least %.1f×)", goalCPURatio, leastCPURatio), Status: statusNotMeasured, Measured: "—"}
	if f, ok := r.Overhead.Row(targetFanout, goalThroughputPhse); ok {
		if h, ok := r.Overhead.Row(targetHAProxy, goalThroughputPhse); ok && !math.IsNaN(f.ReqPerCPUSecond) && !math.IsNaN(h.ReqPerCPUSecond) && h.ReqPerCPUSecond > 0 {
			ratio := f.ReqPerCPUSecond / h.ReqPerCPUSecond
			row.Measured = fmt.Sprintf("fanout %.0f, HAProxy %.0f (%.2f×)", f.ReqPerCPUSecond, h.ReqPerCPUSecond, ratio)
			row.Status = graded(ratio >= goalCPURatio, ratio >= leastCPURatio)
		}
	}
	rows = append(rows, row)

	// 2. p99 at 1k req/s against HAProxy's.
	row = TargetRow{Target: "fanout's p99 ≤ HAProxy's at 1k req/s", Status: statusNotMeasured, Measured: "—"}
	if f, ok := r.Overhead.Row(targetFanout, goalAddedP99Phase); ok {
		if h, ok := r.Overhead.Row(targetHAProxy, goalAddedP99Phase); ok && f.Runs > 0 && h.Runs > 0 {
			row.Measured = fmt.Sprintf("fanout %s, HAProxy %s", fmtDur(f.P99), fmtDur(h.P99))
			row.Status = metStatus(f.P99 <= h.P99)
		}
	}
	rows = append(rows, row)

	// 3. p99 added over direct at 1k req/s.
	row = TargetRow{Target: fmt.Sprintf("p99 added over direct ≤ %s at 1k req/s", fmtDur(goalAddedP99)), Status: statusNotMeasured, Measured: "—"}
	if f, ok := r.Overhead.Row(targetFanout, goalAddedP99Phase); ok {
		if d, ok := r.Overhead.Row(targetDirect, goalAddedP99Phase); ok && f.Runs > 0 && d.Runs > 0 {
			added := f.P99 - d.P99
			row.Measured = fmt.Sprintf("%s (fanout %s, direct %s)", fmtSignedDur(added), fmtDur(f.P99), fmtDur(d.P99))
			row.Status = metStatus(added <= goalAddedP99)
		}
	}
	rows = append(rows, row)

	// 4. Idle RSS.
	row = TargetRow{Target: fmt.Sprintf("fanout RSS ≤ %d MiB idle", goalIdleRSSMiB), Status: statusNotMeasured, Measured: "—"}
	if r.Overhead != nil {
		if v, ok := r.Overhead.IdleRSSMiB[targetFanout]; ok && !math.IsNaN(v) {
			row.Measured = fmt.Sprintf("%.1f MiB", v)
			if h, ok := r.Overhead.IdleRSSMiB[targetHAProxy]; ok && !math.IsNaN(h) {
				row.Measured += fmt.Sprintf(" (HAProxy %.1f MiB)", h)
			}
			row.Status = metStatus(v <= goalIdleRSSMiB)
		}
	}
	rows = append(rows, row)

	// 5. RSS with 2,000 watches and short requests.
	row = TargetRow{Target: fmt.Sprintf("fanout peak RSS ≤ %d MiB with %d watches + short requests (at least ≤ %d MiB)", goalWatchRSSMiB, goalWatches, leastWatchRSSMiB), Status: statusNotMeasured, Measured: "—"}
	if s := r.Scale; s != nil {
		row.Measured = fmt.Sprintf("%.1f MiB peak with %d watches open", s.PeakRSSMiB, s.WatchesOpen)
		if h := r.ScaleHAProxy; h != nil {
			row.Measured += fmt.Sprintf(" (HAProxy %.1f MiB)", h.PeakRSSMiB)
		}
		if s.WatchesOpen >= goalWatches {
			row.Status = graded(s.PeakRSSMiB <= goalWatchRSSMiB, s.PeakRSSMiB <= leastWatchRSSMiB)
		} else {
			row.Measured += fmt.Sprintf(" (fewer than %d: no verdict)", goalWatches)
		}
	}
	rows = append(rows, row)

	// 6. The library's memory per watch, inside the client process.
	row = TargetRow{Target: "the library's (client.New) memory per watch, in the client process", Status: statusNotMeasured, Measured: "—"}
	if lib, ok := r.Footprint.row("client process, library"); ok {
		row.Measured = fmt.Sprintf("%.1f KiB heap + %.1f KiB stacks", lib.heapPerWatch(), lib.stacksPerWatch())
		if d, ok := r.Footprint.row("client process, direct"); ok {
			row.Measured += fmt.Sprintf(" (client-go alone: %.1f + %.1f KiB)", d.heapPerWatch(), d.stacksPerWatch())
		}
		row.Status = statusMeasured
	}
	rows = append(rows, row)

	// 7. Pick allocations.
	row = TargetRow{Target: "0 allocations in Pick", Status: statusNotMeasured, Measured: "—"}
	if r.Micro != nil {
		worst, n := 0.0, 0
		for _, b := range r.Micro.Benches {
			if strings.HasPrefix(b.Name, "BenchmarkPick") && !math.IsNaN(b.AllocsPerOp) {
				worst = max(worst, b.AllocsPerOp)
				n++
			}
		}
		if n > 0 {
			row.Measured = fmt.Sprintf("at most %g allocs/op over %d Pick benchmarks", worst, n)
			row.Status = metStatus(worst == 0)
		}
	}
	rows = append(rows, row)
	return rows
}

// Render writes the report as Markdown.
func Render(r *Report) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Benchmarks\n\n")
	p("Generated by `e2e/cmd/bench` (run with `make bench`); every number below is its output. Do not edit by hand.\n\n")
	if r.Quick {
		p("> **QUICK RUN** (`-quick`): short phases and one run each. These numbers prove the tool works end to end;\n")
		p("> they are not measurements to quote. Run `make bench` without `-quick` on a quiet machine for those.\n\n")
	}
	p("- Command: %s\n", r.command())
	p("- Expected duration on a quiet machine (from the settings): about %s\n", r.Estimate.Round(time.Minute))
	p("- Started %s, finished %s (%s)\n", r.Started.UTC().Format(time.RFC3339), r.Finished.UTC().Format(time.RFC3339), r.Finished.Sub(r.Started).Round(time.Second))
	p("\n## Machine\n\n| | |\n| --- | --- |\n")
	m := r.Machine
	p("| CPUs (nproc) | %d |\n| CPU model | %s |\n| RAM | %s |\n| kernel | %s |\n| Go | %s |\n| HAProxy | %s |\n| load average at start | %s |\n",
		m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.Go, m.HAProxy, m.LoadAvg)
	if len(r.Settings) > 0 {
		p("\n## Settings\n\n")
		for _, s := range r.Settings {
			p("- %s\n", s)
		}
	}
	if len(r.Failures) > 0 {
		p("\n## Failures\n\n")
		for _, f := range r.Failures {
			p("- %s\n", f)
		}
	}

	p("\n## Targets\n\nComputed from the tables below.")
	if r.Quick {
		p(" **Quick run: these verdicts come from a smoke run and mean nothing yet.**")
	}
	p("\n\n| target | measured | result |\n| --- | --- | --- |\n")
	for _, t := range Targets(r) {
		p("| %s | %s | %s |\n", t.Target, t.Measured, t.Status)
	}

	renderOverhead(&b, r.Overhead)
	renderVariants(&b, r)
	renderRealAPI(&b, r.RealAPI)
	renderScale(&b, r.Scale, r.ScaleTLS, r.ScaleHAProxy)
	renderFootprintSection(&b, r.Footprint)
	renderMicro(&b, r.Micro)
	renderCostBalance(&b, r.CostBalance, r.command())
	return b.String()
}

// command is how the run was started, for the reader to repeat it.
func (r *Report) command() string {
	if r.Via != "" {
		return fmt.Sprintf("`%s`, which ran `%s` in `e2e/`", r.Via, r.Command)
	}
	return fmt.Sprintf("`%s` in `e2e/`", r.Command)
}

func renderOverhead(b *strings.Builder, o *OverheadResult) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## 1. Proxy overhead (fast TLS HTTP/2 backends)\n\n")
	if o == nil {
		p("Not measured.\n")
		return
	}
	p("Three test backends (one process of their own; TLS requiring a client certificate; HTTP/2) answer every GET of `%s` with a %d-byte JSON object. ", shortPath, len(smallObject))
	p("**direct**: the load generator talks HTTP/2 over mTLS to one backend, as client-go does to an apiserver. ")
	p("**fanout** and **HAProxy** (L7, round robin, h2 TLS backends with the client certificate, `/readyz` health checks) each run as a process of their own; ")
	p("the load generator talks plain HTTP/1.1 to them with client-go's keep-alive pool (25 idle connections per host). ")
	p("**fanout-tls** is fanout with `--listen-tls`: the load generator talks HTTP/2 over TLS to it, with the loopback CA and client certificate of the kubeconfig fanout wrote, as client-go does to an https:// server (one connection). ")
	if slices.ContainsFunc(o.Rows, func(r OverheadRow) bool { return r.Target == targetFanoutNoCost }) {
		p("**fanout-nocost** is fanout with its cost table off (`--cost-table-size=0`), to show what the table costs. ")
	}
	p("**library** is fanout linked into the load generator (`client.New` on a rest.Config with the same client certificate and CA, `--endpoints` the three backends): its RoundTripper sends each request over HTTP/2 mTLS to the backend it picks; there is no proxy process. ")
	p("Fixed rates are open loop on a fixed schedule, latency counted from each request's due time; saturation is closed loop. ")
	p("Each cell is the median of %d run(s); the order of the paths rotates between runs.\n\n", o.Runs)
	p("| path | load | runs | requests (all runs) | errors (all runs) | throughput (req/s) | p50 | p99 | p99.9 | proxy CPU s / 10k req | of it user | req / CPU-s | peak RSS (MiB) | load generator CPU s / 10k req |\n")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range o.Rows {
		p("| %s | %s | %d | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Target, r.Phase, r.Runs, r.Sent, r.Errors, r.Throughput, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.P999),
			fmtF(r.CPUPer10k, 3), fmtF(r.UserCPUPer10k, 3), fmtF(r.ReqPerCPUSecond, 0), fmtF(r.PeakRSSMiB, 1), fmtF(r.ClientCPUPer10k, 3))
	}
	p("\nPeak RSS is the proxy's VmHWM at the end of the phase (phases run in table order on one process per run), CPU is utime+stime from /proc/<pid>/stat during the phase, and \"of it user\" its utime: the proxy's own code, the rest being the kernel's work for it (system calls, TCP, scheduling). ")
	p("The last column is the load generator's own utime+stime (/proc/self/stat) per 10,000 successful requests: the client side of each path. ")
	p("The library has no process of its own, so its proxy CPU is what it adds to the load generator: its last column minus direct's, per run and phase (median of the differences; — without a direct run to subtract), and req / CPU-s is 10,000 over that (— when the difference is not positive). ")
	p("Being a difference of two measurements of the same process, it is only as good as the two runs are alike: on a loaded machine, or when one of them failed many requests, it can come out near zero or negative. ")
	p("Its peak RSS cannot be told apart from the load generator's and is not shown.\n")
	p("\nIdle RSS (VmRSS after start and readiness, health probes running, no requests yet; for the library, how much the load generator's VmRSS grew while `client.New` started and idled, each reading after a GC that returns freed memory to the OS):")
	for _, t := range []string{targetFanout, targetFanoutNoCost, targetFanoutTLS, targetHAProxy, targetLibrary} {
		if v, ok := o.IdleRSSMiB[t]; ok {
			p(" %s %.1f MiB;", t, v)
		}
	}
	p("\n\nRun order:")
	for i, ord := range o.Order {
		p(" run %d: %s;", i+1, strings.Join(ord, " → "))
	}
	p("\n")
	if o.ProfileNote != "" {
		p("\n%s\n", o.ProfileNote)
	}
	for _, pr := range o.Profiles {
		p("\n### Where %s spends its CPU at saturation (perf, an extra unmeasured phase of the last run)\n\n", pr.Target)
		p("```sh\n%s\n```\n\n", strings.Join(pr.Commands, "\n"))
		if pr.Err != "" {
			p("perf failed: `%s`\n", pr.Err)
			continue
		}
		p("Per Go package (kernel and C code per binary):\n\n```\n%s\n```\n\nFlat, by binary and by symbol:\n\n```\n%s\n```\n", pr.Packages, pr.Top)
	}
}

func renderRealAPI(b *strings.Builder, r *RealAPIResult) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## 2. Real apiservers (e2e control plane)\n\n")
	if r == nil {
		p("Not measured.\n")
		return
	}
	p("A client-go clientset (GET of a ConfigMap and LIST of 20, alternating) at %.0f req/s open loop for %s per run, against etcd and %d kube-apiservers (%s) of the e2e harness, ",
		r.Rate, r.Duration, len(r.APIServers), strings.Join(r.APIServers, ", "))
	p("each path with a user of its own; shares come from the apiservers' audit logs (health probes left out; each run's warm-up requests included). Latency: median over runs, after a warm-up at the same rate.\n\n")
	p("| path | runs | requests (all runs) | errors (all runs) | throughput (req/s) | p50 | p99 |")
	for i := range r.APIServers {
		p(" apiserver %d |", i+1)
	}
	p("\n| --- | --- | --- | --- | --- | --- | --- |")
	for range r.APIServers {
		p(" --- |")
	}
	p("\n")
	for _, row := range r.Rows {
		p("| %s | %d | %d | %d | %.0f | %s | %s |", row.Target, row.Runs, row.Sent, row.Errors, row.Throughput, fmtDur(row.P50), fmtDur(row.P99))
		shares := shares(row.Served)
		for i := range r.APIServers {
			if i < len(row.Served) {
				p(" %d (%.1f %%) |", row.Served[i], 100*shares[i])
			} else {
				p(" — |")
			}
		}
		p("\n")
	}
	for _, row := range r.Rows {
		if row.FirstErr != "" {
			p("\nFirst error via %s: `%s`\n", row.Target, row.FirstErr)
		}
	}
}

func shares(counts []int) []float64 {
	total := 0
	for _, c := range counts {
		total += c
	}
	out := make([]float64, len(counts))
	for i, c := range counts {
		if total > 0 {
			out[i] = float64(c) / float64(total)
		}
	}
	return out
}

func renderScale(b *strings.Builder, results ...*ScaleResult) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## 3. Scale (fast backends)\n\n")
	var cols []*ScaleResult
	for _, s := range results {
		if s != nil {
			cols = append(cols, s)
		}
	}
	if len(cols) == 0 {
		p("Not measured.\n")
		return
	}
	s := cols[0]
	p("%d watches through one proxy process (each on its own HTTP/1.1 connection, as client-go's over http://; "+
		"to fanout-tls, fanout with `--listen-tls`, over HTTP/2 with the kubeconfig fanout wrote, as client-go's over https://, so they share connections up to fanout's `--max-concurrent-streams` each), "+
		"each receiving one event per %s, plus %.0f req/s of short GETs (open loop) for %s; each proxy fresh. Client connections are the load generator's TCP connections to the proxy; over HTTP/2, requests that start together may each dial one, and net/http closes the surplus.\n\n",
		s.Watches, s.WatchInterval, s.Rate, s.Duration)
	row := func(name string, cell func(*ScaleResult) string) {
		p("| %s |", name)
		for _, c := range cols {
			p(" %s |", cell(c))
		}
		p("\n")
	}
	header := func() {
		p("| metric |")
		for _, c := range cols {
			p(" %s |", c.Target)
		}
		p("\n| --- |")
		for range cols {
			p(" --- |")
		}
		p("\n")
	}
	header()
	row("watches open", func(s *ScaleResult) string { return fmt.Sprintf("%d of %d", s.WatchesOpen, s.Watches) })
	row("client connections open with the watches open (dialed)", func(s *ScaleResult) string { return fmt.Sprintf("%d (%d)", s.WatchConns, s.WatchDials) })
	row("client connections dialed for the short requests", func(s *ScaleResult) string { return fmt.Sprint(s.RequestConns) })
	row("watch events received during the phase", func(s *ScaleResult) string {
		return fmt.Sprintf("%d (expected about %d in %s)", s.Events, s.ExpectedEvents, s.Elapsed.Round(10*time.Millisecond))
	})
	row("short requests: sent / errors", func(s *ScaleResult) string { return fmt.Sprintf("%d / %d", s.Requests.Sent, s.Requests.Errors) })
	row("short requests: throughput", func(s *ScaleResult) string { return fmt.Sprintf("%.0f req/s", s.Requests.Throughput()) })
	row("short requests: p50 / p99 / p99.9", func(s *ScaleResult) string {
		return fmt.Sprintf("%s / %s / %s", fmtDur(s.Lat.P50), fmtDur(s.Lat.P99), fmtDur(s.Lat.P999))
	})
	row("idle RSS before the watches", func(s *ScaleResult) string { return fmt.Sprintf("%.1f MiB", s.IdleRSSMiB) })
	row("peak RSS (VmHWM)", func(s *ScaleResult) string { return fmt.Sprintf("%.1f MiB", s.PeakRSSMiB) })
	row("CPU during the phase", func(s *ScaleResult) string {
		return fmt.Sprintf("%.2f s in %s (%s %% of one core)", s.CPUSeconds, s.Elapsed.Round(10*time.Millisecond), fmtF(s.CPUPercent(), 0))
	})
	p("\nOne LIST of at least %d bytes (%.0f MiB) streamed through a fresh proxy over HTTP/1.1 (to fanout-tls: HTTP/2 over TLS):\n\n", s.ListWant, float64(s.ListWant)/(1<<20))
	header()
	row("error", func(s *ScaleResult) string {
		if s.ListErr == "" {
			return "none"
		}
		return "`" + s.ListErr + "`"
	})
	row("bytes received", func(s *ScaleResult) string { return fmt.Sprint(s.ListBytes) })
	row("duration", func(s *ScaleResult) string { return s.ListDuration.Round(time.Millisecond).String() })
	row("rate", func(s *ScaleResult) string {
		if s.ListDuration <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f MiB/s", float64(s.ListBytes)/(1<<20)/s.ListDuration.Seconds())
	})
	row("idle RSS before", func(s *ScaleResult) string { return fmt.Sprintf("%.1f MiB", s.ListIdleRSSMiB) })
	row("peak RSS (VmHWM)", func(s *ScaleResult) string { return fmt.Sprintf("%.1f MiB", s.ListPeakRSSMiB) })
}

func renderMicro(b *strings.Builder, m *MicroResult) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## 5. Micro benchmarks\n\n")
	if m == nil {
		p("Not measured.\n")
		return
	}
	p("Commands (in the repository root):\n\n```sh\n%s\n```\n\n", strings.Join(m.Commands, "\n"))
	p("| benchmark | samples | ns/op | B/op | allocs/op |\n| --- | --- | --- | --- | --- |\n")
	for _, x := range m.Benches {
		p("| %s | %d | %s | %s | %s |\n", x.Name, x.Samples, fmtF(x.NsPerOp, 1), fmtF(x.BytesPerOp, 0), fmtF(x.AllocsPerOp, 0))
	}
	p("\nTop of the CPU profile of `BenchmarkServeShort` (the proxy's hot path with an in-memory upstream):\n\n```\n%s\n```\n", m.ProfileTop)
}

func fmtF(x float64, prec int) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// fmtDur shows microseconds below 10 ms, milliseconds below 1 s, and
// seconds above.
func fmtDur(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func fmtSignedDur(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}
