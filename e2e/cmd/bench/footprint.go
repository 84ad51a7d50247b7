package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// footprintMain is `fanout-bench footprint`: it accounts for what one open
// watch costs. It opens -watches watches through one fresh fanout process
// per downstream protocol (HTTP/1.1, one connection per watch, as
// client-go's over http://; h2c, all on shared connections), and through
// the library in this process, and reads before and after: the process's
// heap and goroutine profiles (written to -profiles), runtime.MemStats
// after a GC, the goroutine count and VmRSS. The differences divided by
// the watch count are the per-watch cost; the profiles say where it is.
//
// It is not part of the report make bench writes: it measures memory,
// which a busy machine does not disturb, and prints a Markdown table.
func footprintMain(args []string) error {
	fs := flag.NewFlagSet("footprint", flag.ContinueOnError)
	fanoutBin := fs.String("fanout", "", "fanout binary (default: built from the repository)")
	watches := fs.Int("watches", 500, "watches to open per mode")
	every := fs.Duration("watch-interval", 10*time.Second, "each watch gets one event per interval (the first at a random point in it)")
	settle := fs.Duration("settle", 3*time.Second, "wait before each reading (after start, after the watches opened)")
	modes := fs.String("modes", "idle,h1,h2c,direct,library", "what to measure: idle (the process before any watch), h1, h2c (fanout processes), direct and library (in this process)")
	profiles := fs.String("profiles", "", "directory to write the heap and goroutine profiles to (default: none)")
	keep := fs.Bool("keep", false, "keep the work directory")
	rate := fs.Int("memprofilerate", 1, "runtime.MemProfileRate of this process and (GODEBUG=memprofilerate) of fanout: 1 records every allocation, so the profiles itemise exactly")
	if err := fs.Parse(args); err != nil {
		return err
	}
	runtime.MemProfileRate = *rate
	// Inherited by the fanout processes this starts.
	if err := os.Setenv("GODEBUG", strings.Trim(os.Getenv("GODEBUG")+",memprofilerate="+strconv.Itoa(*rate), ",")); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s footprint: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	dir, err := os.MkdirTemp("", "fanout-footprint-")
	if err != nil {
		return err
	}
	if *keep {
		logf("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if *profiles != "" {
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			return err
		}
	}
	if *fanoutBin == "" {
		if *fanoutBin, err = harness.FanoutBinary(ctx, os.Stderr); err != nil {
			return err
		}
	}
	o := Options{WatchInterval: *every, ListBytes: 1 << 20}
	env, closeEnv, err := newBackendEnv(o, dir, *fanoutBin, logf)
	if err != nil {
		return err
	}
	defer closeEnv()

	rows, err := env.measureFootprint(ctx, strings.Split(*modes, ","), *watches, *settle, *profiles, logf)
	if err != nil {
		return err
	}
	fmt.Print(renderFootprint(rows, *watches, *every))
	return nil
}

// measureFootprint measures each mode in turn.
func (env *overheadEnv) measureFootprint(ctx context.Context, modes []string, watches int, settle time.Duration, profiles string, logf func(string, ...any)) ([]footprintRow, error) {
	var rows []footprintRow
	for _, mode := range modes {
		var r footprintRow
		var err error
		switch mode {
		case "idle":
			r, err = env.footprintIdle(ctx, settle, profiles)
		case "h1", "h2c":
			r, err = env.footprintProcess(ctx, mode, "footprint-"+mode, nil, watches, settle, profiles)
		case "direct", "library":
			r, err = env.footprintInProcess(ctx, mode, watches, settle, profiles)
		default:
			err = fmt.Errorf("unknown mode %q; want idle, h1, h2c, direct or library", mode)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode, err)
		}
		logf("%s: %+v", mode, r)
		rows = append(rows, r)
	}
	return rows, nil
}

// FootprintResult is the footprint section of make bench: what one open
// watch costs fanout (HTTP/1.1 and h2c) and a client process (client-go
// alone, and through the library), and the idle process.
type FootprintResult struct {
	Rows           []footprintRow
	Watches        int
	WatchInterval  time.Duration
	MemProfileRate int
	// Profiles is where the heap and goroutine profiles were written, if
	// anywhere.
	Profiles string
	// Rounds are, with -fanout-variants, fanout as built and each variant
	// in each run (mode h1), for the variants' table.
	Rounds []footprintRound
}

// footprintRound is one path's watches in one run.
type footprintRound struct {
	Target string
	Run    int
	Row    footprintRow
}

// footprintModes are the modes make bench measures.
var footprintModes = []string{"idle", "h1", "h2c", "direct", "library"}

// footprintRate is the heap profile sampling rate of the footprint
// section: coarse enough not to weigh on the figures, fine enough for the
// profiles to show where the bytes are.
const footprintRate = 512 << 10

// runFootprint measures with backends of its own that send each watch an
// event every 10 s (the watches are idle, as most of a controller's are),
// with heap profiles sampled at footprintRate in this process and in the
// fanout processes it starts.
func runFootprint(ctx context.Context, o Options, dir, fanoutBin, profiles string, logf func(string, ...any)) (*FootprintResult, error) {
	const every = 10 * time.Second
	prevRate := runtime.MemProfileRate
	runtime.MemProfileRate = footprintRate
	defer func() { runtime.MemProfileRate = prevRate }()
	prevGODEBUG, had := os.LookupEnv("GODEBUG")
	if err := os.Setenv("GODEBUG", strings.Trim(prevGODEBUG+",memprofilerate="+strconv.Itoa(footprintRate), ",")); err != nil {
		return nil, err
	}
	defer func() {
		if had {
			os.Setenv("GODEBUG", prevGODEBUG)
		} else {
			os.Unsetenv("GODEBUG")
		}
	}()
	if profiles != "" {
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			return nil, err
		}
	}
	fdir := filepath.Join(dir, "footprint")
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		return nil, err
	}
	env, closeEnv, err := newBackendEnv(Options{WatchInterval: every, ListBytes: 1 << 20}, fdir, fanoutBin, logf)
	if err != nil {
		return nil, err
	}
	defer closeEnv()
	rows, err := env.measureFootprint(ctx, footprintModes, o.FootprintWatches, footprintSettle, profiles, logf)
	if err != nil {
		return nil, err
	}
	res := &FootprintResult{Rows: rows, Watches: o.FootprintWatches, WatchInterval: every, MemProfileRate: footprintRate, Profiles: profiles}
	if len(o.Variants) == 0 {
		return res, nil
	}
	// The variants in rounds, as the overhead section runs its paths, so
	// that what a variant adds per watch is paired with fanout's in the
	// same round. HTTP/1.1 is how most clients reach a sidecar, and the
	// path that fanout's own server and upstream client both serve.
	paths := append([]string{targetFanout}, o.Variants...)
	for run := range o.Runs {
		for _, t := range rotated(paths, run) {
			r, err := env.footprintProcess(ctx, "h1", fmt.Sprintf("footprint-%s-run%d", t, run), o.VariantArgs[t], o.FootprintWatches, footprintSettle, "")
			if err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", run+1, t, err)
			}
			logf("footprint: run %d/%d: %s: heap %.2f KiB, stacks %.2f KiB, RSS %.1f KiB per watch", run+1, o.Runs, t, r.heapPerWatch(), r.stacksPerWatch(), per(r.Before.RSSKiB, r.After.RSSKiB, r.Watches))
			res.Rounds = append(res.Rounds, footprintRound{Target: t, Run: run, Row: r})
		}
	}
	return res, nil
}

// footprintSettle is the footprint section's wait before each reading.
const footprintSettle = 3 * time.Second

func (f *FootprintResult) row(mode string) (footprintRow, bool) {
	if f == nil {
		return footprintRow{}, false
	}
	for _, r := range f.Rows {
		if r.Mode == mode {
			return r, true
		}
	}
	return footprintRow{}, false
}

func (r footprintRow) heapPerWatch() float64 {
	return per(r.Before.HeapInuse, r.After.HeapInuse, r.Watches) / 1024
}

func (r footprintRow) stacksPerWatch() float64 {
	return per(r.Before.StackInuse, r.After.StackInuse, r.Watches) / 1024
}

func renderFootprintSection(b *strings.Builder, f *FootprintResult) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## 4. Footprint: one open watch, fanout and the library (fast backends)\n\n")
	if f == nil {
		p("Not measured.\n")
		return
	}
	p("Each mode starts fresh (fanout with `--enable-pprof`; the client modes in the load generator's own process), sends one request so that connections and pools exist, is read, opens %d watches, waits 3 s and is read again. ", f.Watches)
	p("A reading is four GCs, then `runtime.MemStats` (from `/debug/pprof/heap?gc=1&debug=1` for fanout), the goroutine count and VmRSS/VmHWM and the anonymous part of RSS from /proc. ")
	p("**fanout h1** is one HTTP/1.1 connection per watch (client-go with an `http://` kubeconfig), **fanout h2c** HTTP/2 with prior knowledge; ")
	p("**client process, direct** is client-go's transport (HTTP/2 mTLS) straight to a backend, what a client spends on a watch without fanout; **client process, library** is the same process through `client.New`'s RoundTripper, so the library's own cost is that row minus direct's. ")
	p("Heap profiles are sampled every %d KiB (`GODEBUG=memprofilerate=%d`).", f.MemProfileRate>>10, f.MemProfileRate)
	if f.Profiles != "" {
		p(" The heap and goroutine profiles of every reading are in `%s`; e.g. `go tool pprof -top -sample_index=inuse_space -diff_base h1-before.heap.pb.gz h1-watches.heap.pb.gz` and `go tool pprof -traces h1-watches.goroutine.pb.gz` there.", f.Profiles)
	}
	p(" The same measurement alone: `fanout-bench footprint -fanout BIN -watches %d -memprofilerate %d -profiles DIR` (docs/footprint.md).\n\n", f.Watches, f.MemProfileRate)
	b.WriteString(renderFootprint(f.Rows, f.Watches, f.WatchInterval))
}

// memSnap is one reading of a process.
type memSnap struct {
	RSSKiB uint64
	// HWMKiB is the peak VmRSS so far (VmHWM).
	HWMKiB uint64
	// AnonKiB is the anonymous part of RSS (heap, stacks, runtime); the
	// rest is file-backed: the executable's pages that were touched.
	AnonKiB    uint64
	HeapInuse  uint64
	StackInuse uint64
	// Other is the runtime's own structures that grow with goroutines
	// and spans (MSpanInuse, MCacheInuse, BuckHashSys, GCSys, OtherSys).
	Other      uint64
	HeapObjs   uint64
	Goroutines int
}

type footprintRow struct {
	Mode    string
	Watches int
	Before  memSnap
	After   memSnap
	Profile []string // files written
}

func per(a, b uint64, n int) float64 { return (float64(b) - float64(a)) / float64(max(n, 1)) }

func renderFootprint(rows []footprintRow, watches int, every time.Duration) string {
	var b strings.Builder
	for _, r := range rows {
		if r.Mode == "idle" {
			fmt.Fprintf(&b, "Idle fanout (started, ready, no request yet), with --enable-pprof: VmRSS %.1f MiB (anonymous %.1f, file-backed %.1f), heap in use %.1f MiB, stacks %.1f MiB, other runtime memory %.1f MiB, %d heap objects, %d goroutines.\n",
				float64(r.After.RSSKiB)/1024, float64(r.After.AnonKiB)/1024, float64(r.After.RSSKiB-r.After.AnonKiB)/1024,
				float64(r.After.HeapInuse)/(1<<20), float64(r.After.StackInuse)/(1<<20), float64(r.After.Other)/(1<<20), r.After.HeapObjs, r.After.Goroutines)
			fmt.Fprintf(&b, "Idle fanout without --enable-pprof (as make bench runs it): VmRSS %.1f MiB (anonymous %.1f, file-backed %.1f).\n\n",
				float64(r.Before.RSSKiB)/1024, float64(r.Before.AnonKiB)/1024, float64(r.Before.RSSKiB-r.Before.AnonKiB)/1024)
		}
	}
	fmt.Fprintf(&b, "%d watches per mode, one event per %s each; readings after GCs.\n\n", watches, every)
	b.WriteString("| mode | VmRSS before → after (MiB) | peak VmRSS (VmHWM, MiB) | RSS / watch | heap in use / watch | stacks / watch | runtime other / watch | heap objects / watch | goroutines / watch |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		if r.Mode == "idle" {
			continue
		}
		n := r.Watches
		fmt.Fprintf(&b, "| %s | %.1f → %.1f | %.1f | %.1f KiB | %.1f KiB | %.1f KiB | %.1f KiB | %.1f | %.2f |\n", r.Mode,
			float64(r.Before.RSSKiB)/1024, float64(r.After.RSSKiB)/1024, float64(r.After.HWMKiB)/1024,
			per(r.Before.RSSKiB, r.After.RSSKiB, n),
			per(r.Before.HeapInuse, r.After.HeapInuse, n)/1024,
			per(r.Before.StackInuse, r.After.StackInuse, n)/1024,
			per(r.Before.Other, r.After.Other, n)/1024,
			per(r.Before.HeapObjs, r.After.HeapObjs, n),
			(float64(r.After.Goroutines)-float64(r.Before.Goroutines))/float64(max(n, 1)))
	}
	b.WriteString("\nThe client-process rows share the process with the load generator, which reuses memory it freed: their RSS column says nothing.\n")
	return b.String()
}

// footprintIdle starts fanout and reads it after settle, with no request.
func (env *overheadEnv) footprintIdle(ctx context.Context, settle time.Duration, profDir string) (footprintRow, error) {
	p, err := env.startPprofFanout(ctx, "footprint-idle")
	if err != nil {
		return footprintRow{}, err
	}
	defer p.Stop()
	sleepCtx(ctx, settle)
	s, files, err := p.snapshot(profDir, "idle")
	if err != nil {
		return footprintRow{}, err
	}
	// As the other sections run it: without --enable-pprof, so only /proc
	// can be read.
	var eps []string
	for _, b := range env.backends {
		eps = append(eps, "https://"+b)
	}
	plain, err := startFanout(ctx, env.fanout, env.dir, "footprint-idle-plain", env.kubecfg, eps, "http")
	if err != nil {
		return footprintRow{}, err
	}
	defer plain.Stop()
	sleepCtx(ctx, settle)
	u, err := plain.Usage()
	if err != nil {
		return footprintRow{}, err
	}
	anon, err := anonKiB(plain.PID())
	return footprintRow{Mode: "idle", Before: memSnap{RSSKiB: u.RSSKiB, AnonKiB: anon}, After: s, Profile: files}, err
}

// startPprofFanout starts fanout with --enable-pprof and extra flags. Its
// listener serves HTTP/1.1 and h2c alike; the client decides.
func (env *overheadEnv) startPprofFanout(ctx context.Context, name string, extra ...string) (*Proc, error) {
	var eps []string
	for _, b := range env.backends {
		eps = append(eps, "https://"+b)
	}
	return startFanout(ctx, env.fanout, env.dir, name, env.kubecfg, eps, "http", append([]string{"--enable-pprof"}, extra...)...)
}

// footprintProcess opens n watches through a fresh fanout, started as name
// with extra flags, over mode (h1: one HTTP/1.1 connection each; h2c:
// HTTP/2 with prior knowledge, shared connections).
func (env *overheadEnv) footprintProcess(ctx context.Context, mode, name string, extra []string, n int, settle time.Duration, profDir string) (footprintRow, error) {
	p, err := env.startPprofFanout(ctx, name, extra...)
	if err != nil {
		return footprintRow{}, err
	}
	defer p.Stop()
	// One request first, so that the upstream connections, the pools and
	// the first-use allocations are in "before", not counted per watch.
	c := newH1Client(n)
	if mode == "h2c" {
		tr := c.Transport.(*http.Transport)
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	defer c.CloseIdleConnections()
	if err := getter(c, p.URL+shortPath, 10*time.Second)(ctx); err != nil {
		return footprintRow{}, fmt.Errorf("first request: %w", err)
	}
	sleepCtx(ctx, settle)
	before, files, err := p.snapshot(profDir, mode+"-before")
	if err != nil {
		return footprintRow{}, err
	}
	stopWatches, err := openWatches(ctx, c, p.URL, n)
	if err != nil {
		return footprintRow{}, err
	}
	defer stopWatches()
	sleepCtx(ctx, settle)
	after, files2, err := p.snapshot(profDir, mode+"-watches")
	return footprintRow{Mode: "fanout " + mode, Watches: n, Before: before, After: after, Profile: append(files, files2...)}, err
}

// footprintInProcess opens n watches from this process: direct (HTTP/2
// mTLS to one backend, as client-go does) or through the library's
// RoundTripper. Both include this process's own reading side, so the
// library's cost is its row minus direct's.
func (env *overheadEnv) footprintInProcess(ctx context.Context, mode string, n int, settle time.Duration, profDir string) (footprintRow, error) {
	var c *http.Client
	var url string
	switch mode {
	case "direct":
		tc, err := env.clientTLS()
		if err != nil {
			return footprintRow{}, err
		}
		c, url = newH2Client(tc), "https://"+env.backends[0]
	case "library":
		lib, err := env.startLibrary()
		if err != nil {
			return footprintRow{}, err
		}
		defer lib.Close()
		c, url = &http.Client{Transport: lib.RoundTripper()}, "https://"+env.backends[0]
	}
	defer c.CloseIdleConnections()
	// Warm every backend's connection (the library spreads watches).
	for range 6 {
		if err := getter(c, url+shortPath, 10*time.Second)(ctx); err != nil {
			return footprintRow{}, fmt.Errorf("first request: %w", err)
		}
	}
	sleepCtx(ctx, settle)
	before, files, err := selfSnapshot(profDir, mode+"-before")
	if err != nil {
		return footprintRow{}, err
	}
	stopWatches, err := openWatches(ctx, c, url, n)
	if err != nil {
		return footprintRow{}, err
	}
	sleepCtx(ctx, settle)
	after, files2, err := selfSnapshot(profDir, mode+"-watches")
	stopWatches()
	return footprintRow{Mode: "client process, " + mode, Watches: n, Before: before, After: after, Profile: append(files, files2...)}, err
}

// openWatches opens n watches and reads each in a goroutine of its own
// until stop is called.
func openWatches(ctx context.Context, c *http.Client, base string, n int) (stop func(), err error) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var open atomic.Int64
	var firstErr atomic.Pointer[error]
	sem := make(chan struct{}, 50)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			url := fmt.Sprintf("%s/api/v1/namespaces/bench/configmaps?watch=true&labelSelector=w%%3D%d", base, i)
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, url, nil)
			resp, err := c.Do(req)
			<-sem
			if err != nil {
				if wctx.Err() == nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err := fmt.Errorf("watch: %s", resp.Status)
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			open.Add(1)
			buf := make([]byte, 512)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
			}
		})
	}
	stop = func() { cancel(); wg.Wait() }
	deadline := time.Now().Add(time.Minute)
	for open.Load() < int64(n) && firstErr.Load() == nil && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	if p := firstErr.Load(); p != nil {
		stop()
		return nil, fmt.Errorf("opening %d watches (%d open): %w", n, open.Load(), *p)
	}
	if open.Load() < int64(n) {
		stop()
		return nil, fmt.Errorf("only %d of %d watches open after a minute", open.Load(), n)
	}
	return stop, nil
}

// snapshot reads a fanout process with --enable-pprof: a heap profile
// after a GC (its debug=1 form ends with runtime.MemStats), the goroutine
// count, and VmRSS; with profDir, the binary heap and goroutine profiles
// are written there as name.heap.pb.gz and name.goroutine.pb.gz.
func (p *Proc) snapshot(profDir, name string) (memSnap, []string, error) {
	var s memSnap
	var files []string
	c := &http.Client{Timeout: 30 * time.Second}
	get := func(path string) ([]byte, error) {
		resp, err := c.Get(p.AdminURL + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
		}
		return b, err
	}
	if profDir != "" {
		for _, kind := range []string{"heap", "goroutine"} {
			q := ""
			if kind == "heap" {
				q = "?gc=1"
			}
			b, err := get("/debug/pprof/" + kind + q)
			if err != nil {
				return s, nil, err
			}
			f := filepath.Join(profDir, name+"."+kind+".pb.gz")
			if err := os.WriteFile(f, b, 0o644); err != nil {
				return s, nil, err
			}
			files = append(files, f)
		}
	}
	// Stacks shrink by half per GC while they use under a quarter: a few
	// GCs first, so that what is read is what a busy process (which runs
	// GCs often) settles at.
	for range settleGCs {
		if _, err := get("/debug/pprof/heap?gc=1"); err != nil {
			return s, nil, err
		}
	}
	heap, err := get("/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return s, nil, err
	}
	ms := parseMemStats(string(heap))
	s.HeapInuse, s.StackInuse, s.HeapObjs = ms["HeapInuse"], ms["Stack"], ms["HeapObjects"]
	s.Other = ms["MSpan"] + ms["MCache"] + ms["BuckHashSys"] + ms["GCSys"] + ms["OtherSys"]
	gr, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return s, nil, err
	}
	line, _, _ := strings.Cut(string(gr), "\n")
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &s.Goroutines); err != nil {
		return s, nil, fmt.Errorf("goroutine profile: %q: %w", line, err)
	}
	u, err := p.Usage()
	if err != nil {
		return s, nil, err
	}
	s.RSSKiB, s.HWMKiB = u.RSSKiB, u.HWMKiB
	s.AnonKiB, err = anonKiB(p.PID())
	return s, files, err
}

// anonKiB reads the Anonymous line of /proc/PID/smaps_rollup.
func anonKiB(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatusKiB(string(b), "Anonymous")
}

// settleGCs is how many GCs run before a reading.
const settleGCs = 4

// parseMemStats reads the "# Name = value" lines a debug=1 heap profile
// ends with.
func parseMemStats(text string) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		// "Stack = inuse / sys": the first is the one in use.
		v, _, _ = strings.Cut(v, " / ")
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// selfSnapshot is snapshot for this process.
func selfSnapshot(profDir, name string) (memSnap, []string, error) {
	var s memSnap
	var files []string
	for range settleGCs + 1 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.HeapInuse, s.StackInuse, s.HeapObjs = ms.HeapInuse, ms.StackInuse, ms.HeapObjects
	s.Other = ms.MSpanInuse + ms.MCacheInuse + ms.BuckHashSys + ms.GCSys + ms.OtherSys
	s.Goroutines = runtime.NumGoroutine()
	u, err := selfUsage()
	if err != nil {
		return s, nil, err
	}
	s.RSSKiB = u.RSSKiB
	if s.AnonKiB, err = anonKiB(os.Getpid()); err != nil {
		return s, nil, err
	}
	if profDir != "" {
		for _, kind := range []string{"heap", "goroutine"} {
			f := filepath.Join(profDir, name+"."+kind+".pb.gz")
			out, err := os.Create(f)
			if err != nil {
				return s, nil, err
			}
			err = pprof.Lookup(kind).WriteTo(out, 0)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return s, nil, err
			}
			files = append(files, f)
		}
	}
	return s, files, nil
}
