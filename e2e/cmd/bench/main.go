// Command bench measures fanout next to the alternatives users compare it
// with, in one run on one machine, and writes docs/benchmarks.md:
//
//  1. proxy overhead: direct (HTTP/2 mTLS), fanout, HAProxy (L7), fanout
//     linked into the client as a library (package client) and fanout with
//     --listen-tls (HTTP/2 over TLS from the client) in front of three fast
//     TLS HTTP/2 backends, at fixed rates (open loop) and at saturation
//     (closed loop), with each proxy's CPU and peak RSS read from /proc, and
//     the load generator's own CPU (which is where the library's shows);
//  2. real apiservers: a client-go workload against the e2e harness's
//     control plane, directly, through HAProxy and through fanout, with each
//     apiserver's share from the audit logs;
//  3. scale: 2,000 watches plus 500 req/s through fanout (plaintext and
//     --listen-tls) and HAProxy, with the client connections each needed,
//     and a LIST of 100 MiB streamed through each;
//  4. the Go micro benchmarks of Pick and the proxy's hot path, with the top
//     of a CPU profile;
//  5. cost balance (section costbalance, not run by default): each real
//     apiserver's CPU under a mixed workload of cheap GETs and LISTs of
//     thousands of objects through fanout, HAProxy leastconn, HAProxy
//     roundrobin and direct, to see whether balancing by count balances
//     the work. Run it alone with `make bench BENCH_ARGS='-sections
//     costbalance -out /tmp/costbalance.md'` (about six minutes); -out
//     keeps docs/benchmarks.md, which every run rewrites whole.
//
// With -fanout-variants, each variant (fanout as built with extra flags)
// runs in every run of the overhead section beside the other paths and, in
// the footprint section, in every run beside fanout as built. A table after
// section 1 compares each with fanout, paired by run: requests per
// CPU-second at saturation, proxy CPU per 10k requests and p99 at each
// fixed rate, heap and stacks and RSS per open watch, idle RSS, and the
// verdict of the 15% rule (ruleMargin). The comparison of fanout's own
// HTTP/2 client and HTTP/1.1 server with the standard library's, about 25
// minutes:
//
//	cd e2e && go build -o /tmp/fanout-bench ./cmd/bench
//	/tmp/fanout-bench -fanout BIN -sections overhead,footprint -targets fanout \
//	  -fanout-variants 'stdh2=--upstream-http2=std,stdh1=--h1-server=std' \
//	  -rates 1000 -runs 10 -phase 15s -warmup 3s -out /tmp/variants.md
//
// Every figure in the report is computed from what this run measured; the
// Targets table too. Run it with `make bench` (as root: the control plane's
// test hosts are network namespaces, and HAProxy is installed with apt-get
// when missing). `make bench BENCH_ARGS=-quick` is a smoke run with short
// phases that proves the tool works but measures nothing worth quoting.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// Options are the benchmark's knobs; see the flags in main.
type Options struct {
	Quick    bool
	Sections map[string]bool
	Targets  []string // direct, fanout, haproxy, library, fanout-tls, fanout+NAME
	// Variants are the -fanout-variants paths (fanout+NAME) in the order
	// given, and VariantArgs the extra flags of each.
	Variants    []string
	VariantArgs map[string][]string
	// NoSaturation leaves out the overhead section's saturation phase
	// (and the perf profiles, taken at saturation).
	NoSaturation  bool
	Runs          int
	Phases        []Phase
	PhaseDuration time.Duration
	Warmup        time.Duration
	IdleWait      time.Duration
	Workers       int
	IdlePerHost   int
	MaxInflight   int
	APIRate       float64
	APIDuration   time.Duration
	Watches       int
	WatchInterval time.Duration
	ScaleRate     float64
	ScaleDuration time.Duration
	ListBytes     int64
	MicroCount    int
	MicroTime     string
	// FootprintWatches is how many watches each footprint mode opens;
	// Profiles where that section writes its heap and goroutine profiles.
	FootprintWatches int
	Profiles         string
	// The costbalance section: CostObjects ConfigMaps, client A's GETs
	// and LISTs per second, client B's LISTs per second, the phase per
	// target.
	CostObjects                               int
	CostGetRate, CostListRateA, CostListRateB float64
	CostPhase                                 time.Duration
}

var allSections = []string{"micro", "overhead", "scale", "realapi", "footprint", "costbalance"}

// defaultSections are what a run without -sections measures: costbalance
// takes about six minutes more and answers a narrower question.
var defaultSections = []string{"micro", "overhead", "scale", "realapi", "footprint"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "backends" {
		if err := backendsMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "backends: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "footprint" {
		if err := footprintMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "footprint: %v\n", err)
			harness.Teardown()
			os.Exit(1)
		}
		harness.Teardown()
		return
	}
	o, out, fanoutBin, keep, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	err = run(o, out, fanoutBin, keep)
	harness.Teardown()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (o Options, out, fanoutBin string, keep bool, err error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "smoke run: 3 s phases, 1 run, 1 micro-benchmark sample; the report says so")
	sections := fs.String("sections", strings.Join(defaultSections, ","), "sections to run, of "+strings.Join(allSections, ", "))
	runs := fs.Int("runs", 5, "runs of each section; the report shows medians")
	rates := fs.String("rates", "1000,5000", "fixed rates (req/s) of the overhead section, besides saturation")
	phase := fs.Duration("phase", 20*time.Second, "length of each load phase of the overhead section")
	warmup := fs.Duration("warmup", 3*time.Second, "warm-up before the phases of each proxy")
	idle := fs.Duration("idle-wait", 3*time.Second, "how long a fresh proxy idles before its idle RSS is read")
	workers := fs.Int("workers", 16, "closed-loop workers at saturation (HTTP/1.1: one connection each)")
	idlePerHost := fs.Int("idle-per-host", clientGoIdlePerHost, "the HTTP/1.1 client's idle connections per host (client-go: 25)")
	maxInflight := fs.Int("max-inflight", 5000, "open loop: requests due beyond this many in flight are counted as errors")
	apiRate := fs.Float64("api-rate", 100, "client-go requests per second against the real apiservers")
	apiDur := fs.Duration("api-duration", 20*time.Second, "length of each real-apiserver run")
	watches := fs.Int("watches", goalWatches, "watches of the scale section")
	watchEvery := fs.Duration("watch-interval", time.Second, "each watch gets one event per interval")
	scaleRate := fs.Float64("scale-rate", 500, "short requests per second beside the watches")
	scaleDur := fs.Duration("scale-duration", 30*time.Second, "length of the scale phase")
	listMiB := fs.Int64("list-mib", 100, "size of the streamed LIST in MiB")
	microCount := fs.Int("micro-count", 5, "go test -count of the micro benchmarks")
	microTime := fs.String("micro-benchtime", "1s", "go test -benchtime of the micro benchmarks")
	fpWatches := fs.Int("footprint-watches", 500, "watches each mode of the footprint section opens")
	costObjects := fs.Int("cost-objects", 3000, "costbalance: ConfigMaps of 1 KiB that every LIST returns")
	costGetRate := fs.Float64("cost-get-rate", 50, "costbalance: client A's GETs per second")
	costListA := fs.Float64("cost-list-rate-a", 0.2, "costbalance: client A's LISTs per second")
	costListB := fs.Float64("cost-list-rate-b", 2, "costbalance: client B's LISTs per second")
	costPhase := fs.Duration("cost-phase", 60*time.Second, "costbalance: length of the measured phase of each target")
	profiles := fs.String("profiles", "", "directory for the footprint section's heap and goroutine profiles (default: docs/profiles/bench in the repository when -out is the default, none otherwise)")
	targets := fs.String("targets", strings.Join(allTargets, ","), "paths to measure: direct, fanout, haproxy, library (fanout linked into the load generator), fanout-tls (fanout --listen-tls); fanout-nocost (fanout --cost-table-size=0: not by default; beside fanout it measures the cost table); the Targets table needs the first three, library's CPU figure needs direct")
	variants := fs.String("fanout-variants", "", "more fanout paths, each with extra flags, measured in the same rotation as the others (and, with the footprint section, per open watch beside fanout in every run) and compared with fanout in a table of their own: name=flags,... (flags separated by spaces), e.g. 'steady=--sysmon=steady,nocost=--cost-table-size=0'; each is the path fanout+name")
	saturation := fs.Bool("saturation", true, "run the overhead section's saturation phase after the fixed rates (and profile the proxies there when perf is installed)")
	fs.StringVar(&out, "out", "", "report path (default docs/benchmarks.md in the repository)")
	fs.StringVar(&fanoutBin, "fanout", "", "fanout binary (default: built from the repository)")
	fs.BoolVar(&keep, "keep", false, "keep the work directory (logs, configs, profiles)")
	if err = fs.Parse(args); err != nil {
		return
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		// Short everything the user did not set explicitly.
		quickDefaults := map[string]func(){
			"runs":              func() { *runs = 1 },
			"phase":             func() { *phase = 3 * time.Second },
			"warmup":            func() { *warmup = time.Second },
			"idle-wait":         func() { *idle = time.Second },
			"api-duration":      func() { *apiDur = 3 * time.Second },
			"scale-duration":    func() { *scaleDur = 3 * time.Second },
			"micro-count":       func() { *microCount = 1 },
			"micro-benchtime":   func() { *microTime = "100ms" },
			"footprint-watches": func() { *fpWatches = 50 },
			"cost-phase":        func() { *costPhase = 10 * time.Second },
		}
		for name, f := range quickDefaults {
			if !set[name] {
				f()
			}
		}
	}
	o = Options{
		Quick: *quick, Sections: map[string]bool{}, Runs: *runs, PhaseDuration: *phase, Warmup: *warmup, IdleWait: *idle,
		Workers: *workers, IdlePerHost: *idlePerHost, MaxInflight: *maxInflight,
		APIRate: *apiRate, APIDuration: *apiDur,
		Watches: *watches, WatchInterval: *watchEvery, ScaleRate: *scaleRate, ScaleDuration: *scaleDur,
		ListBytes: *listMiB << 20, MicroCount: *microCount, MicroTime: *microTime,
		FootprintWatches: *fpWatches, Profiles: *profiles,
		CostObjects: *costObjects, CostGetRate: *costGetRate, CostListRateA: *costListA, CostListRateB: *costListB, CostPhase: *costPhase,
	}
	for _, s := range strings.Split(*sections, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(","+strings.Join(allSections, ",")+",", ","+s+",") {
			err = fmt.Errorf("-sections: unknown section %q (have %s)", s, strings.Join(allSections, ", "))
			return
		}
		o.Sections[s] = true
	}
	for _, t := range strings.Split(*targets, ",") {
		if !slices.Contains(knownTargets, t) {
			err = fmt.Errorf("-targets: unknown path %q (have %s)", t, strings.Join(knownTargets, ", "))
			return
		}
		o.Targets = append(o.Targets, t)
	}
	if o.Variants, o.VariantArgs, err = parseVariants(*variants); err != nil {
		return
	}
	o.Targets = append(o.Targets, o.Variants...)
	if o.Phases, err = parsePhases(*rates); err != nil {
		return
	}
	if o.NoSaturation = !*saturation; o.NoSaturation {
		o.Phases = o.Phases[:len(o.Phases)-1]
		if len(o.Phases) == 0 {
			err = errors.New("-saturation=false needs at least one of -rates")
			return
		}
	}
	if o.Runs < 1 || o.Workers < 1 || o.Watches < 0 || o.FootprintWatches < 1 {
		err = errors.New("-runs, -workers and -footprint-watches must be at least 1, -watches at least 0")
		return
	}
	if o.CostObjects < 1 || o.CostGetRate < 0 || o.CostListRateA < 0 || o.CostListRateB < 0 || o.CostPhase <= 0 {
		err = errors.New("-cost-objects must be at least 1, -cost-get-rate, -cost-list-rate-a and -cost-list-rate-b at least 0, -cost-phase positive")
	}
	return
}

// parsePhases turns "1000,5000" into 1k, 5k and saturation.
func parsePhases(rates string) ([]Phase, error) {
	var ps []Phase
	for _, s := range strings.Split(rates, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive number", s)
		}
		name := strconv.FormatFloat(r, 'f', -1, 64)
		if r >= 1000 && int(r)%1000 == 0 {
			name = fmt.Sprintf("%dk", int(r)/1000)
		}
		ps = append(ps, Phase{Name: name, Rate: r})
	}
	return append(ps, Phase{Name: "saturation"}), nil
}

func run(o Options, out, fanoutBin string, keep bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	modDir, err := harness.ModuleDir()
	if err != nil {
		return err
	}
	root := filepath.Dir(modDir)
	if out == "" {
		out = filepath.Join(root, "docs", "benchmarks.md")
		if o.Profiles == "" {
			o.Profiles = filepath.Join(root, "docs", "profiles", "bench")
		}
	}
	dir, err := os.MkdirTemp("", "fanout-bench-")
	if err != nil {
		return err
	}
	if keep {
		logf("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if fanoutBin == "" {
		if fanoutBin, err = harness.FanoutBinary(ctx, os.Stderr); err != nil {
			return err
		}
	}

	r := &Report{Started: time.Now(), Quick: o.Quick, Machine: describeMachine(), Settings: settings(o), Estimate: Estimate(o),
		Variants: o.Variants, VariantArgs: o.VariantArgs}
	r.Command, r.Via = commandLine()
	logf("expected to take about %s on a quiet machine", r.Estimate.Round(time.Minute))
	fail := func(section string, err error) {
		logf("%s failed: %v", section, err)
		r.Failures = append(r.Failures, fmt.Sprintf("%s: %s", section, strings.ReplaceAll(err.Error(), "\n", " ")))
	}

	if o.Sections["micro"] {
		if r.Micro, err = runMicro(ctx, root, dir, o.MicroCount, o.MicroTime, logf); err != nil {
			fail("micro benchmarks", err)
		}
	}
	if o.Sections["overhead"] || o.Sections["scale"] {
		env, closeEnv, err := newBackendEnv(o, dir, fanoutBin, logf)
		if err != nil {
			fail("fast backends", err)
		} else {
			if o.Sections["overhead"] && ctx.Err() == nil {
				if r.Overhead, err = runOverhead(ctx, env); err != nil {
					fail("proxy overhead", err)
				}
			}
			if o.Sections["scale"] && ctx.Err() == nil {
				if r.Scale, err = runScale(ctx, env, targetFanout); err != nil {
					fail("scale (fanout)", err)
				}
			}
			if o.Sections["scale"] && ctx.Err() == nil && slices.Contains(o.Targets, targetFanoutTLS) {
				if r.ScaleTLS, err = runScale(ctx, env, targetFanoutTLS); err != nil {
					fail("scale (fanout-tls)", err)
				}
			}
			if o.Sections["scale"] && ctx.Err() == nil && slices.Contains(o.Targets, targetHAProxy) {
				if r.ScaleHAProxy, err = runScale(ctx, env, targetHAProxy); err != nil {
					fail("scale (HAProxy)", err)
				}
			}
			closeEnv()
		}
	}
	if o.Sections["realapi"] && ctx.Err() == nil {
		if r.RealAPI, err = runRealAPI(ctx, o, dir, logf); err != nil {
			fail("real apiservers", err)
		}
	}
	if o.Sections["footprint"] && ctx.Err() == nil {
		if r.Footprint, err = runFootprint(ctx, o, dir, fanoutBin, o.Profiles, logf); err != nil {
			fail("footprint", err)
		} else if rel, err := filepath.Rel(root, o.Profiles); err == nil && !strings.HasPrefix(rel, "..") {
			r.Footprint.Profiles = rel // the report names it as the repository does
		}
	}
	if o.Sections["costbalance"] && ctx.Err() == nil {
		if r.CostBalance, err = runCostBalance(ctx, o, dir, fanoutBin, logf); err != nil {
			fail("cost balance", err)
		} else {
			var b strings.Builder
			renderCostBalance(&b, r.CostBalance, r.command())
			fmt.Print(b.String())
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; %s not written", out)
	}
	r.Finished = time.Now()
	if err := os.WriteFile(out, []byte(Render(r)+keptSection(out)), 0o644); err != nil {
		return err
	}
	logf("wrote %s in %s", out, r.Finished.Sub(r.Started).Round(time.Second))
	if len(r.Failures) > 0 {
		return fmt.Errorf("%d section(s) failed; see %s", len(r.Failures), out)
	}
	return nil
}

// newBackendEnv makes a PKI, starts the fast backends and writes fanout's
// kubeconfig (the admin client certificate, the first backend as server).
func newBackendEnv(o Options, dir, fanoutBin string, logf func(string, ...any)) (*overheadEnv, func(), error) {
	pki, err := harness.NewPKI(filepath.Join(dir, "pki"), []net.IP{net.ParseIP("127.0.0.1")}, harness.ServiceIP)
	if err != nil {
		return nil, nil, err
	}
	b, err := StartBackends(pki.Serving.CertFile, pki.Serving.KeyFile, pki.CA.CertFile, o.WatchInterval, o.ListBytes, filepath.Join(dir, "backends.log"))
	if err != nil {
		return nil, nil, err
	}
	kc := filepath.Join(dir, "fanout-kubeconfig")
	if err := pki.WriteKubeconfig(kc, "https://"+b.Addrs[0], pki.Admin); err != nil {
		b.Close()
		return nil, nil, err
	}
	logf("fast backends at %s", strings.Join(b.Addrs, ", "))
	return &overheadEnv{opts: o, dir: dir, pki: pki, backends: b.Addrs, fanout: fanoutBin, kubecfg: kc, logf: logf}, b.Close, nil
}

// commandLine is how this binary was run, and how make bench was (it sets
// FANOUT_BENCH_VIA to its own command line).
func commandLine() (cmd, via string) {
	cmd = strings.TrimSpace(filepath.Base(os.Args[0]) + " " + strings.Join(os.Args[1:], " "))
	return cmd, strings.TrimSpace(os.Getenv("FANOUT_BENCH_VIA"))
}

// Estimate is roughly how long a run with o takes on a quiet machine,
// from the phase lengths plus a few seconds per process start.
func Estimate(o Options) time.Duration {
	const start = 2 * time.Second // starting and stopping one proxy
	var d time.Duration
	if o.Sections["micro"] {
		// 6 Pick benchmarks and 1 hot-path one, plus compiling.
		d += time.Duration(7*o.MicroCount)*parseBenchtime(o.MicroTime) + 30*time.Second
	}
	if o.Sections["overhead"] {
		perTarget := start + o.IdleWait + o.Warmup + time.Duration(len(o.Phases))*o.PhaseDuration
		d += time.Duration(o.Runs*len(o.Targets)) * perTarget
		procs := 0 // the perf phases of the proxy processes
		for _, t := range o.Targets {
			if !inProcess(t) && !o.NoSaturation {
				procs++
			}
		}
		d += time.Duration(procs) * (o.PhaseDuration + 5*time.Second)
	}
	if o.Sections["scale"] {
		scaled := 1 // fanout always, then fanout-tls and HAProxy if asked for
		for _, t := range []string{targetFanoutTLS, targetHAProxy} {
			if slices.Contains(o.Targets, t) {
				scaled++
			}
		}
		d += time.Duration(scaled) * (2*(start+o.IdleWait) + 10*time.Second + o.ScaleDuration)
	}
	if o.Sections["realapi"] {
		d += 30 * time.Second // the control plane
		d += time.Duration(o.Runs*len(o.Targets)) * (start + o.Warmup + o.APIDuration)
	}
	if o.Sections["costbalance"] {
		// The control plane, 3,000 creates, then each target.
		d += 30*time.Second + time.Duration(o.CostObjects)*5*time.Millisecond
		d += time.Duration(len(costTargets(o.Targets))) * (start + o.Warmup + o.CostPhase + 5*time.Second)
	}
	if o.Sections["footprint"] {
		// Five modes, and with variants fanout and each variant in every
		// run: start, two settles, opening the watches (6-7 s each with
		// 500 watches on 2 CPUs, 2026-12-05).
		n := len(footprintModes)
		if len(o.Variants) > 0 {
			n += o.Runs * (1 + len(o.Variants))
		}
		d += time.Duration(n) * (start + 2*footprintSettle + time.Second)
	}
	return d
}

func parseBenchtime(s string) time.Duration {
	if d, err := time.ParseDuration(s); err == nil {
		return d
	}
	return time.Second // a count like "100x": guess
}

func settings(o Options) []string {
	var names []string
	for _, s := range allSections {
		if o.Sections[s] {
			names = append(names, s)
		}
	}
	var rates []string
	for _, p := range o.Phases {
		rates = append(rates, p.Name)
	}
	out := []string{
		"sections: " + strings.Join(names, ", "),
		fmt.Sprintf("runs: %d of the overhead and real-apiserver sections (medians reported); the scale section runs once", o.Runs),
		"the load generator, the backends and the proxy under test share this machine's CPUs",
	}
	if o.Sections["overhead"] {
		out = append(out, fmt.Sprintf("overhead: phases %s, %s each after a %s warm-up; %d closed-loop workers at saturation; HTTP/1.1 pool of %d idle connections per host; open loop counts requests due beyond %d in flight as errors", strings.Join(rates, ", "), o.PhaseDuration, o.Warmup, o.Workers, o.IdlePerHost, o.MaxInflight))
	}
	if o.Sections["realapi"] {
		out = append(out, fmt.Sprintf("real apiservers: %.0f req/s for %s per run", o.APIRate, o.APIDuration))
	}
	if o.Sections["scale"] {
		out = append(out, fmt.Sprintf("scale: %d watches, one event per %s each, plus %.0f req/s for %s; LIST of %d MiB", o.Watches, o.WatchInterval, o.ScaleRate, o.ScaleDuration, o.ListBytes>>20))
	}
	if o.Sections["micro"] {
		out = append(out, fmt.Sprintf("micro: go test -count %d -benchtime %s", o.MicroCount, o.MicroTime))
	}
	if o.Sections["footprint"] {
		out = append(out, fmt.Sprintf("footprint: %d watches per mode, one event per 10s each", o.FootprintWatches))
	}
	if len(o.Variants) > 0 {
		var vs []string
		for _, v := range o.Variants {
			vs = append(vs, fmt.Sprintf("%s `%s`", v, strings.Join(o.VariantArgs[v], " ")))
		}
		out = append(out, fmt.Sprintf("variants: %s; in every run of the overhead section beside the other paths, and of the footprint section beside fanout (HTTP/1.1 watches)", strings.Join(vs, ", ")))
	}
	if o.Sections["costbalance"] {
		out = append(out, fmt.Sprintf("costbalance: %d ConfigMaps of 1 KiB; client A %g GET/s + %g LIST/s, client B %g LIST/s; %s per target after a %s warm-up", o.CostObjects, o.CostGetRate, o.CostListRateA, o.CostListRateB, o.CostPhase, o.Warmup))
	}
	return out
}

// keptMarker starts the part of a report that is written by hand (a
// decision taken on a run of its own, with the table that decided it):
// it runs to the end of the file, and a new report of the same file
// keeps it.
const keptMarker = "<!-- Kept by fanout-bench: written by hand, from here to the end. -->"

// keptSection is what of the report at path a new one keeps: from
// keptMarker to the end, "" when there is none (or no file).
func keptSection(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i := strings.Index(string(b), keptMarker)
	if i < 0 {
		return ""
	}
	return "\n" + string(b[i:])
}
