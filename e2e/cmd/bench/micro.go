package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// MicroBench is one Go benchmark, median over -count.
type MicroBench struct {
	Name        string
	Samples     int
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
}

// MicroResult is section 4 of the report.
type MicroResult struct {
	Commands []string
	Benches  []MicroBench
	// ProfileTop is `go tool pprof -top` of the hot-path benchmark.
	ProfileTop string
}

// benchLine matches a `go test -bench -benchmem` result line. The -N suffix
// is GOMAXPROCS.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op\s+([\d.]+) allocs/op)?`)

// ParseBenchOutput reads `go test -bench -benchmem` output and returns one
// entry per benchmark, in first-seen order, with the median of each metric
// over its samples.
func ParseBenchOutput(out string) []MicroBench {
	type acc struct{ ns, b, a []float64 }
	var order []string
	accs := map[string]*acc{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		a := accs[m[1]]
		if a == nil {
			a = &acc{}
			accs[m[1]] = a
			order = append(order, m[1])
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		a.ns = append(a.ns, ns)
		if m[3] != "" {
			b, _ := strconv.ParseFloat(m[3], 64)
			al, _ := strconv.ParseFloat(m[4], 64)
			a.b = append(a.b, b)
			a.a = append(a.a, al)
		}
	}
	var res []MicroBench
	for _, name := range order {
		a := accs[name]
		res = append(res, MicroBench{Name: name, Samples: len(a.ns), NsPerOp: Median(a.ns), BytesPerOp: Median(a.b), AllocsPerOp: Median(a.a)})
	}
	return res
}

// runMicro runs the balancer's Pick benchmarks and the proxy's hot-path
// benchmark (with a CPU profile) in the main module at root.
func runMicro(ctx context.Context, root, dir string, count int, benchtime string, logf func(string, ...any)) (*MicroResult, error) {
	res := &MicroResult{}
	prof := filepath.Join(dir, "serve-short.cpu.pprof")
	testBin := filepath.Join(dir, "proxy.test")
	cmds := [][]string{
		{"go", "test", "-run", "^$", "-bench", "^BenchmarkPick", "-benchmem", "-benchtime", benchtime, "-count", fmt.Sprint(count), "./components/balancer/"},
		{"go", "test", "-run", "^$", "-bench", "^BenchmarkServeShort$", "-benchmem", "-benchtime", benchtime, "-count", fmt.Sprint(count), "-cpuprofile", prof, "-o", testBin, "./components/proxy/"},
	}
	var out strings.Builder
	for _, argv := range cmds {
		res.Commands = append(res.Commands, strings.Join(quoteArgs(argv), " "))
		logf("micro: %s", strings.Join(argv, " "))
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, b)
		}
		out.Write(b)
	}
	res.Benches = ParseBenchOutput(out.String())
	top := []string{"go", "tool", "pprof", "-top", "-nodecount=20", testBin, prof}
	res.Commands = append(res.Commands, strings.Join(quoteArgs(top), " "))
	cmd := exec.CommandContext(ctx, top[0], top[1:]...)
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(top, " "), err)
	}
	res.ProfileTop = strings.TrimSpace(string(b))
	return res, nil
}

func quoteArgs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, "^$ *?") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}
