package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The ways a client reaches the apiservers; see targets.go for library
// and fanout-tls.
const (
	targetDirect  = "direct"
	targetFanout  = "fanout"
	targetHAProxy = "haproxy"
)

var allTargets = []string{targetDirect, targetFanout, targetHAProxy, targetLibrary, targetFanoutTLS}

// knownTargets are allTargets and the paths measured only when -targets
// names them.
var knownTargets = append(slices.Clone(allTargets), targetFanoutNoCost)

// rotated returns targets starting at run modulo their count, so each
// target goes first, second and last equally often across runs and none
// always runs on the coldest or the most fragmented machine.
func rotated(targets []string, run int) []string {
	n := len(targets)
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, targets[(run+i)%n])
	}
	return out
}

// Phase is one load level: a fixed rate (open loop) or, with Rate 0,
// saturation (closed loop).
type Phase struct {
	Name string
	Rate float64
}

// PhaseMeasure is one target's numbers for one phase of one run.
type PhaseMeasure struct {
	Target, Phase string
	Run           int
	Load          LoadResult
	Lat           LatencySummary
	// CPUSeconds is the proxy process's utime+stime during the phase (NaN
	// for direct and library, which have none); PeakRSSKiB its VmHWM at
	// the end of the phase.
	CPUSeconds float64
	// UserCPUSeconds is the utime part of CPUSeconds: the proxy's own
	// code, the rest being the kernel's work for it (NaN likewise).
	UserCPUSeconds float64
	PeakRSSKiB     float64
	// SelfCPUSeconds is the load generator's own utime+stime during the
	// phase: the client side of every path, and for library the library
	// too.
	SelfCPUSeconds float64
}

// OverheadRow is the median over runs of one target and phase.
type OverheadRow struct {
	Target, Phase  string
	Rate           float64
	Runs           int
	Sent, Errors   int // summed over runs
	Throughput     float64
	P50, P99, P999 time.Duration
	// CPUPer10k is the proxy's CPU seconds per 10,000 requests. The
	// library has no process of its own: its figure is the load
	// generator's CPU per 10,000 requests beyond direct's in the same run
	// and phase (median of the per-run differences).
	CPUPer10k float64
	// UserCPUPer10k is the utime part of CPUPer10k (NaN for the library,
	// whose figure is a difference of totals).
	UserCPUPer10k   float64
	ReqPerCPUSecond float64
	PeakRSSMiB      float64
	// ClientCPUPer10k is the load generator's own CPU seconds per 10,000
	// requests (client side, and for library the library in it).
	ClientCPUPer10k float64
}

// OverheadResult is section 1 of the report.
type OverheadResult struct {
	Rows []OverheadRow
	// IdleRSSMiB is each proxy's VmRSS after start and readiness, before
	// any load (probes running): median over runs.
	IdleRSSMiB map[string]float64
	Runs       int
	Order      [][]string // target order of each run
	// Profiles are perf profiles of the proxies during an extra saturation
	// phase of the last run; ProfileNote says why there are none.
	Profiles    []ProxyProfile
	ProfileNote string
	// Measures are every run's figures and IdleRounds every run's idle
	// RSS (MiB), for the variants' table.
	Measures   []PhaseMeasure
	IdleRounds []roundValue
}

// Row finds a row.
func (o *OverheadResult) Row(target, phase string) (OverheadRow, bool) {
	if o == nil {
		return OverheadRow{}, false
	}
	for _, r := range o.Rows {
		if r.Target == target && r.Phase == phase {
			return r, true
		}
	}
	return OverheadRow{}, false
}

// AggregateOverhead takes the median of each metric over runs.
func AggregateOverhead(ms []PhaseMeasure, phases []Phase, targets []string) []OverheadRow {
	var rows []OverheadRow
	for _, t := range targets {
		for _, ph := range phases {
			row := OverheadRow{Target: t, Phase: ph.Name, Rate: ph.Rate}
			var thr, p50, p99, p999, cpu10k, user10k, rpc, rss, self10k []float64
			for _, m := range ms {
				if m.Target != t || m.Phase != ph.Name {
					continue
				}
				row.Runs++
				row.Sent += m.Load.Sent
				row.Errors += m.Load.Errors
				thr = append(thr, m.Load.Throughput())
				p50 = append(p50, float64(m.Lat.P50))
				p99 = append(p99, float64(m.Lat.P99))
				p999 = append(p999, float64(m.Lat.P999))
				c10, r := math.NaN(), math.NaN()
				if !math.IsNaN(m.CPUSeconds) && m.Load.OK > 0 {
					c10 = m.CPUSeconds / float64(m.Load.OK) * 10000
					if m.CPUSeconds > 0 {
						r = float64(m.Load.OK) / m.CPUSeconds
					}
				}
				if t == targetLibrary {
					c10, r = libraryCPUPer10k(m, ms), math.NaN()
					if c10 > 0 {
						r = 10000 / c10
					}
				}
				cpu10k = append(cpu10k, c10)
				user10k = append(user10k, per10k(m.UserCPUSeconds, m.Load.OK))
				rpc = append(rpc, r)
				rss = append(rss, m.PeakRSSKiB/1024)
				self10k = append(self10k, per10k(m.SelfCPUSeconds, m.Load.OK))
			}
			if row.Runs == 0 {
				continue
			}
			row.Throughput = Median(thr)
			row.P50 = time.Duration(Median(p50))
			row.P99 = time.Duration(Median(p99))
			row.P999 = time.Duration(Median(p999))
			row.CPUPer10k = Median(cpu10k)
			row.UserCPUPer10k = Median(user10k)
			row.ReqPerCPUSecond = Median(rpc)
			row.PeakRSSMiB = Median(rss)
			row.ClientCPUPer10k = Median(self10k)
			rows = append(rows, row)
		}
	}
	return rows
}

// per10k is CPU seconds per 10,000 of ok requests, NaN when unknown.
func per10k(cpu float64, ok int) float64 {
	if math.IsNaN(cpu) || ok <= 0 {
		return math.NaN()
	}
	return cpu / float64(ok) * 10000
}

// libraryCPUPer10k is what the library adds to the load generator's CPU per
// 10,000 requests: lib's own-process CPU per 10k minus that of direct in the
// same run and phase (both send the same requests from the same load
// generator; direct over one HTTP/2 connection of net/http, library through
// fanout's request path). NaN without a direct measurement to subtract.
func libraryCPUPer10k(lib PhaseMeasure, ms []PhaseMeasure) float64 {
	for _, d := range ms {
		if d.Target == targetDirect && d.Phase == lib.Phase && d.Run == lib.Run {
			return per10k(lib.SelfCPUSeconds, lib.Load.OK) - per10k(d.SelfCPUSeconds, d.Load.OK)
		}
	}
	return math.NaN()
}

// overheadEnv is what every run of section 1 shares.
type overheadEnv struct {
	opts     Options
	dir      string
	pki      *harness.PKI
	backends []string
	fanout   string // binary
	kubecfg  string // fanout's kubeconfig (the admin client cert)
	logf     func(string, ...any)
}

const shortPath = "/api/v1/namespaces/bench/configmaps/cm"

// runOverhead is section 1: direct, fanout and HAProxy against the fast
// backends, in rotating order, opts.Runs times.
func runOverhead(ctx context.Context, env *overheadEnv) (*OverheadResult, error) {
	o := env.opts
	res := &OverheadResult{Runs: o.Runs, IdleRSSMiB: map[string]float64{}}
	var all []PhaseMeasure
	idle := map[string][]float64{}
	for run := range o.Runs {
		order := rotated(o.Targets, run)
		res.Order = append(res.Order, order)
		for _, t := range order {
			env.logf("overhead: run %d/%d: %s", run+1, o.Runs, t)
			ms, idleKiB, prof, err := env.runTarget(ctx, t, run, run == o.Runs-1)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", run+1, t, err)
			}
			if prof != nil {
				res.Profiles = append(res.Profiles, *prof)
			}
			all = append(all, ms...)
			if !math.IsNaN(idleKiB) {
				idle[t] = append(idle[t], idleKiB/1024)
				res.IdleRounds = append(res.IdleRounds, roundValue{Target: t, Run: run, V: idleKiB / 1024})
			}
		}
	}
	if !perfAvailable() {
		res.ProfileNote = "perf is not installed (Debian: apt-get install linux-perf), so there are no profiles of the proxy processes."
	}
	res.Rows = AggregateOverhead(all, o.Phases, o.Targets)
	res.Measures = all
	for t, v := range idle {
		res.IdleRSSMiB[t] = Median(v)
	}
	return res, nil
}

// startProxy starts fanout or HAProxy in front of the fast backends; name
// labels its files.
func (env *overheadEnv) startProxy(ctx context.Context, target, name string) (*Proc, error) {
	var eps []string
	for _, b := range env.backends {
		eps = append(eps, "https://"+b)
	}
	if args, ok := env.opts.VariantArgs[target]; ok {
		return startFanout(ctx, env.fanout, env.dir, name, env.kubecfg, eps, "http", args...)
	}
	switch target {
	case targetFanout:
		return StartFanout(ctx, env.fanout, env.dir, name, env.kubecfg, eps)
	case targetFanoutTLS:
		return StartFanoutTLS(ctx, env.fanout, env.dir, name, env.kubecfg, eps)
	case targetFanoutNoCost:
		return startFanout(ctx, env.fanout, env.dir, name, env.kubecfg, eps, "http", "--cost-table-size=0")
	case targetHAProxy:
		return StartHAProxy(ctx, env.dir, name, env.backends, env.pki.CA.CertFile, env.pki.Admin.CertPEM, env.pki.Admin.KeyPEM, "")
	}
	return nil, fmt.Errorf("no proxy for %q", target)
}

func (env *overheadEnv) clientTLS() (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AddCert(env.pki.CA.Cert)
	cert, err := tls.X509KeyPair(env.pki.Admin.CertPEM, env.pki.Admin.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// runTarget starts the target's proxy (none for direct, the in-process
// library for library), reads its idle RSS, warms up, and runs every
// phase, reading the proxy's CPU and the load generator's own around each.
// With profile, an extra saturation phase runs under perf (when installed).
func (env *overheadEnv) runTarget(ctx context.Context, target string, run int, profile bool) (_ []PhaseMeasure, _ float64, _ *ProxyProfile, err error) {
	o := env.opts
	var proxy *Proc
	var client *http.Client
	var url string
	idleKiB := math.NaN()
	switch target {
	case targetDirect:
		tc, err := env.clientTLS()
		if err != nil {
			return nil, 0, nil, err
		}
		client, url = newH2Client(tc), "https://"+env.backends[0]+shortPath
	case targetLibrary:
		lib, idle, err := env.libraryIdle(ctx, o.IdleWait)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("starting the library: %w", err)
		}
		defer lib.Close()
		idleKiB = idle
		// The URL's host is ignored: the library picks the backend.
		client, url = &http.Client{Transport: lib.RoundTripper()}, "https://"+env.backends[0]+shortPath
	default:
		proxy, err = env.startProxy(ctx, target, fmt.Sprintf("overhead-%s-run%d", target, run))
	}
	if err != nil {
		return nil, 0, nil, err
	}
	if proxy != nil {
		defer proxy.Stop()
		client, url = proxyClient(proxy, o.IdlePerHost), proxy.URL+shortPath
	}
	defer client.CloseIdleConnections()

	if proxy != nil {
		sleepCtx(ctx, o.IdleWait)
		u, err := proxy.Usage()
		if err != nil {
			return nil, 0, nil, err
		}
		idleKiB = float64(u.RSSKiB)
	}
	do := getter(client, url, 10*time.Second)
	if w := ClosedLoop(ctx, do, 4, o.Warmup); w.OK == 0 {
		return nil, 0, nil, fmt.Errorf("warm-up through %s: no request succeeded: %v", target, w.FirstErr)
	}
	var out []PhaseMeasure
	for _, ph := range o.Phases {
		var before ProcUsage
		if proxy != nil {
			if before, err = proxy.Usage(); err != nil {
				return nil, 0, nil, err
			}
		}
		selfBefore, err := selfUsage()
		if err != nil {
			return nil, 0, nil, err
		}
		var lr LoadResult
		if ph.Rate > 0 {
			lr = OpenLoop(ctx, do, ph.Rate, o.PhaseDuration, o.MaxInflight)
		} else {
			lr = ClosedLoop(ctx, do, o.Workers, o.PhaseDuration)
		}
		if ctx.Err() != nil {
			return nil, 0, nil, ctx.Err()
		}
		selfAfter, err := selfUsage()
		if err != nil {
			return nil, 0, nil, err
		}
		m := PhaseMeasure{Target: target, Phase: ph.Name, Run: run, Load: lr, Lat: Summarize(lr.Latencies), CPUSeconds: math.NaN(), UserCPUSeconds: math.NaN(),
			PeakRSSKiB: math.NaN(), SelfCPUSeconds: selfAfter.CPUSeconds() - selfBefore.CPUSeconds()}
		if proxy != nil {
			after, err := proxy.Usage()
			if err != nil {
				return nil, 0, nil, err
			}
			m.CPUSeconds = after.CPUSeconds() - before.CPUSeconds()
			m.UserCPUSeconds = after.UserCPUSeconds() - before.UserCPUSeconds()
			m.PeakRSSKiB = float64(after.HWMKiB)
		}
		if lr.Errors > 0 {
			env.logf("overhead: %s %s: %d of %d requests failed, first: %v", target, ph.Name, lr.Errors, lr.Sent, lr.FirstErr)
		}
		env.logf("overhead: %s %s: %.0f req/s, p50 %s p99 %s, proxy cpu %.2fs (user %.2fs), load generator cpu %.2fs", target, ph.Name, lr.Throughput(), m.Lat.P50, m.Lat.P99, m.CPUSeconds, m.UserCPUSeconds, m.SelfCPUSeconds)
		out = append(out, m)
	}
	var prof *ProxyProfile
	if profile && proxy != nil && perfAvailable() && !o.NoSaturation {
		p := profileProc(ctx, target, proxy.PID(), filepath.Join(env.dir, target+".perf.data"), o.Profiles, o.PhaseDuration, func() {
			ClosedLoop(ctx, do, o.Workers, o.PhaseDuration)
		})
		prof = &p
	}
	return out, idleKiB, prof, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
