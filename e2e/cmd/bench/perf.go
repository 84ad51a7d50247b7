package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProxyProfile is a perf(1) profile of a proxy process at saturation: the
// real process with real sockets, which the micro benchmarks' in-memory
// profile cannot show.
type ProxyProfile struct {
	Target   string
	Commands []string
	Top      string // perf report, flat: by binary, then by symbol, above 1 %
	// Packages sums the samples per Go package (kernel and C code per
	// binary), heaviest first: Go's costs are spread over many small
	// functions, so the flat top alone hides where they come from.
	Packages string
	Err      string
}

// perfAvailable reports whether perf can be run.
func perfAvailable() bool {
	_, err := exec.LookPath("perf")
	return err == nil
}

// profileProc samples pid with perf for d while load runs, and returns the
// flat top of the profile. perf's own cost lands on this extra phase only,
// never on a measured one.
//
// With saveDir set, the cumulative view (each function with its callees,
// which shows which goroutine's work the kernel and runtime time is
// spent for) is also written there as TARGET-saturation.perf.txt, small
// enough to commit beside the report.
func profileProc(ctx context.Context, target string, pid int, file, saveDir string, d time.Duration, load func()) ProxyProfile {
	rec := []string{"perf", "record", "-g", "-F", "999", "-p", fmt.Sprint(pid), "-o", file, "--", "sleep", fmt.Sprint(int(d.Seconds() + 0.5))}
	byDSO := []string{"perf", "report", "-i", file, "--stdio", "--no-children", "-g", "none", "--sort", "dso", "--percent-limit", "1"}
	bySym := []string{"perf", "report", "-i", file, "--stdio", "--no-children", "-g", "none", "--sort", "dso,symbol", "--percent-limit", "1"}
	p := ProxyProfile{Target: target, Commands: []string{strings.Join(rec, " "), strings.Join(byDSO, " "), strings.Join(bySym, " ")}}
	cmd := exec.CommandContext(ctx, rec[0], rec[1:]...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		p.Err = err.Error()
		return p
	}
	load()
	if err := cmd.Wait(); err != nil {
		p.Err = fmt.Sprintf("%v: %s", err, strings.TrimSpace(out.String()))
		return p
	}
	all := []string{"perf", "report", "-i", file, "--stdio", "--no-children", "-g", "none", "--sort", "dso,symbol", "--percent-limit", "0"}
	p.Commands = append(p.Commands, strings.Join(all, " ")+"  # summed per Go package by the tool")
	b, err := exec.CommandContext(ctx, all[0], all[1:]...).Output()
	if err != nil {
		p.Err = fmt.Sprintf("%s: %v", strings.Join(all, " "), err)
		return p
	}
	p.Packages = PerfByPackage(string(b), 15)
	var tops []string
	for _, rep := range [][]string{byDSO, bySym} {
		b, err := exec.CommandContext(ctx, rep[0], rep[1:]...).Output()
		if err != nil {
			p.Err = fmt.Sprintf("%s: %v", strings.Join(rep, " "), err)
			return p
		}
		tops = append(tops, PerfTop(string(b), 30))
	}
	p.Top = strings.Join(tops, "\n\n")
	if saveDir != "" {
		children := []string{"perf", "report", "-i", file, "--stdio", "--children", "-g", "none", "--percent-limit", "0.5"}
		b, err := exec.CommandContext(ctx, children[0], children[1:]...).Output()
		if err != nil {
			p.Err = fmt.Sprintf("%s: %v", strings.Join(children, " "), err)
			return p
		}
		saved := filepath.Join(saveDir, target+"-saturation.perf.txt")
		if err := os.MkdirAll(saveDir, 0o755); err != nil {
			p.Err = err.Error()
			return p
		}
		if err := os.WriteFile(saved, b, 0o644); err != nil {
			p.Err = err.Error()
			return p
		}
		p.Commands = append(p.Commands, strings.Join(children, " ")+" > "+filepath.Base(saved)+"  # saved beside the footprint profiles")
	}
	return p
}

// ipcColumns are the empty IPC columns perf adds when the hardware has no
// IPC counters (always, in a VM).
var ipcColumns = regexp.MustCompile(`(\s+-){2}\s*$`)

// PerfTop keeps the n heaviest sample lines of `perf report --stdio`,
// heaviest first, without its comment header, blank lines and empty IPC
// columns.
func PerfTop(report string, n int) string {
	type entry struct {
		pct  float64
		line string
	}
	var es []entry
	for _, line := range strings.Split(report, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		pct, _, _ := strings.Cut(t, "%")
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil {
			continue
		}
		es = append(es, entry{v, strings.TrimRight(ipcColumns.ReplaceAllString(line, ""), " ")})
	}
	slices.SortStableFunc(es, func(a, b entry) int { return cmp.Compare(b.pct, a.pct) })
	var keep []string
	for _, e := range es[:min(n, len(es))] {
		keep = append(keep, e.line)
	}
	return strings.Join(keep, "\n")
}

// PerfByPackage sums the lines of `perf report --sort dso,symbol` per Go
// package ("runtime", "net/http", "crypto/internal/...") and returns the n
// heaviest as "  12.3%  package" lines. Kernel symbols count as "kernel",
// symbols that are not Go's as their binary.
func PerfByPackage(report string, n int) string {
	sums := map[string]float64{}
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[0], "%") || strings.HasPrefix(f[0], "#") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		sums[symbolPackage(f[1], f[2], f[3])] += pct
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(sums[b], sums[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%7.2f%%  %s", sums[k], k))
	}
	return strings.Join(out, "\n")
}

// goSymbol is a Go symbol: an import path, a dot, a name.
var goSymbol = regexp.MustCompile(`^((?:[\w.\-]+/)*[\w\-]+)\.`)

func symbolPackage(dso, kind, sym string) string {
	if kind == "[k]" {
		return "kernel"
	}
	if m := goSymbol.FindStringSubmatch(sym); m != nil {
		return m[1]
	}
	return dso
}
