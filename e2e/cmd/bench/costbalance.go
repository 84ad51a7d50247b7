package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The cost-balance section asks whether balancing by request count (or by
// requests in flight) spreads the apiservers' work when requests differ a
// in cost: cheap GETs beside LISTs of thousands of objects. It
// reads each apiserver's own CPU, which is what an operator sizes for.
//
// Its targets, in the order they run:
const (
	costFanout            = "fanout"
	costHAProxyLeastConn  = "haproxy leastconn"
	costHAProxyRoundRobin = "haproxy roundrobin"
	// costDirect is client-go straight to an apiserver, what an L4
	// balancer that pins each client's connection gives: client A to the
	// first apiserver, client B to the second.
	costDirect = "direct"
)

// costTargets are the section's targets that -targets asks for: fanout,
// both HAProxy balance algorithms for haproxy, and direct.
func costTargets(targets []string) []string {
	want := map[string]bool{}
	for _, t := range targets {
		switch t {
		case targetFanout:
			want[costFanout] = true
		case targetHAProxy:
			want[costHAProxyLeastConn], want[costHAProxyRoundRobin] = true, true
		case targetDirect:
			want[costDirect] = true
		}
	}
	var out []string
	for _, t := range []string{costFanout, costHAProxyLeastConn, costHAProxyRoundRobin, costDirect} {
		if want[t] {
			out = append(out, t)
		}
	}
	return out
}

// CostStream is one of the workload's request streams during the phase.
type CostStream struct {
	Name     string  // e.g. "A GET"
	Offered  float64 // req/s
	Sent, OK int
	Errors   int
	// Achieved is successful requests per second of the phase (not of
	// the first to the last response, which flatters a stream of a few
	// requests).
	Achieved float64
	FirstErr string
}

// CostBalanceRow is one target.
type CostBalanceRow struct {
	Target string
	// CPU is each apiserver's process_cpu_seconds_total gained during the
	// phase.
	CPU []float64
	// Gets and Lists are the requests of the target's user each apiserver
	// served during the phase, from the audit logs.
	Gets, Lists []int
	Streams     []CostStream
}

// Ratio is the busiest apiserver's CPU over the idlest's.
func (r CostBalanceRow) Ratio() float64 { return maxMinRatio(r.CPU) }

// CostBalanceResult is section 6 of the report.
type CostBalanceResult struct {
	APIServers []string
	// Objects ConfigMaps of about ObjectBytes each are what every LIST
	// returns.
	Objects, ObjectBytes int
	// GetRate and ListRateA are client A's GETs and LISTs per second,
	// ListRateB client B's LISTs.
	GetRate, ListRateA, ListRateB float64
	Warmup, Phase                 time.Duration
	// LoadStart and LoadEnd are the machine's load averages when the
	// section began and ended: the apiservers share the CPUs with the
	// clients, the proxy and whatever else runs.
	LoadStart, LoadEnd string
	Rows               []CostBalanceRow
}

// costNamespace holds the objects every LIST returns.
const costNamespace = "costbalance"

// runCostBalance starts the e2e control plane, creates the objects once,
// then runs the workload through each target in turn for the same phase,
// reading every apiserver's CPU before and after.
func runCostBalance(ctx context.Context, o Options, dir, fanoutBin string, logf func(string, ...any)) (*CostBalanceResult, error) {
	targets := costTargets(o.Targets)
	if len(targets) == 0 {
		return nil, errors.New("-targets names none of direct, fanout, haproxy")
	}
	loadStart := loadAvg()
	if err := harness.SweepStale(); err != nil {
		logf("costbalance: sweeping leftovers of earlier runs: %v", err)
	}
	cp, err := harness.Start(ctx, nil, harness.Options{Logf: logf})
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	defer cp.Close()
	eps := cp.Endpoints()
	res := &CostBalanceResult{
		APIServers: eps, Objects: o.CostObjects, ObjectBytes: costObjectBytes,
		GetRate: o.CostGetRate, ListRateA: o.CostListRateA, ListRateB: o.CostListRateB,
		Warmup: o.Warmup, Phase: o.CostPhase, LoadStart: loadStart,
	}
	metrics := make([]kubernetes.Interface, len(cp.APIServers))
	for i, a := range cp.APIServers {
		cfg := rest.CopyConfig(cp.Admin)
		cfg.Host, cfg.Timeout = a.URL, 10*time.Second
		if metrics[i], err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, err
		}
	}
	logf("costbalance: creating %d ConfigMaps of %d bytes", o.CostObjects, costObjectBytes)
	creator := rest.CopyConfig(cp.Admin)
	// The admin client's default 5 requests per second would take ten
	// minutes for 3,000.
	creator.QPS, creator.Burst = 1e6, 1e6
	cs, err := kubernetes.NewForConfig(creator)
	if err != nil {
		return nil, err
	}
	if err := createCostObjects(ctx, cs, o.CostObjects); err != nil {
		return nil, err
	}
	var servers []string
	for _, ep := range eps {
		servers = append(servers, strings.TrimPrefix(ep, "https://"))
	}

	for _, t := range targets {
		user := "cost-" + strings.ReplaceAll(t, " ", "-")
		ck, err := cp.PKI.MintUser(user, "system:masters")
		if err != nil {
			return nil, err
		}
		// One kubeconfig per apiserver: direct pins client A to the first
		// and B to the second; the proxies start from the first, as a
		// user's kubeconfig names one address.
		kcs := make([]string, len(eps))
		for i, ep := range eps {
			kcs[i] = filepath.Join(dir, fmt.Sprintf("kubeconfig-%s-%d", user, i))
			if err := cp.PKI.WriteKubeconfig(kcs[i], ep, ck); err != nil {
				return nil, err
			}
		}
		var cfgA, cfgB *rest.Config
		stop := func() {}
		switch t {
		case costDirect:
			if cfgA, err = harness.RESTConfig(kcs[0]); err == nil {
				cfgB, err = harness.RESTConfig(kcs[1%len(kcs)])
			}
		case costFanout:
			var p *Proc
			if p, err = StartFanout(ctx, fanoutBin, dir, "cost-fanout", kcs[0], eps); err == nil {
				cfgA, cfgB, stop = &rest.Config{Host: p.URL}, &rest.Config{Host: p.URL}, p.Stop
			}
		case costHAProxyLeastConn, costHAProxyRoundRobin:
			balance := strings.TrimPrefix(t, "haproxy ")
			var p *Proc
			if p, err = StartHAProxy(ctx, dir, "cost-haproxy-"+balance, servers, cp.PKI.CA.CertFile, ck.CertPEM, ck.KeyPEM, balance); err == nil {
				cfgA, cfgB, stop = &rest.Config{Host: p.URL}, &rest.Config{Host: p.URL}, p.Stop
			}
		}
		if err != nil {
			return nil, fmt.Errorf("costbalance %s: %w", t, err)
		}
		logf("costbalance: %s: %s warm-up, then %s", t, o.Warmup, o.CostPhase)
		row, err := costPhase(ctx, o, cfgA, cfgB, metrics)
		stop()
		if err != nil {
			return nil, fmt.Errorf("costbalance %s: %w", t, err)
		}
		row.Target = t
		start := row.start
		for verb, into := range map[string]*[]int{"get": &row.Gets, "list": &row.Lists} {
			*into, err = cp.ServedPerAPIServerWhere(func(e *harness.AuditEvent) bool {
				return e.User.Username == user && e.Verb == verb && !e.StageTimestamp.Before(start)
			})
			if err != nil {
				return nil, err
			}
		}
		logf("costbalance: %s: CPU s per apiserver %s (max/min %s), GETs %v, LISTs %v", t, fmtCPUs(row.CPU), fmtF(row.Ratio(), 2), row.Gets, row.Lists)
		res.Rows = append(res.Rows, row.CostBalanceRow)
	}
	res.LoadEnd = loadAvg()
	return res, nil
}

// costObjectBytes is the size of each ConfigMap's one value.
const costObjectBytes = 1024

// createCostObjects creates the namespace and n ConfigMaps of about 1 KiB,
// a few at a time.
func createCostObjects(ctx context.Context, cs kubernetes.Interface, n int) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: costNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	value := strings.Repeat("x", costObjectBytes)
	cms := cs.CoreV1().ConfigMaps(costNamespace)
	const workers = 8
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"v": value}}
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("creating ConfigMap %d of %d: %w", i+1, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when closed empty
}

type costPhaseResult struct {
	CostBalanceRow
	start time.Time // when the measured phase began
}

// costPhase runs the workload for the warm-up, reads the apiservers' CPU,
// runs it for the phase and reads the CPU again.
func costPhase(ctx context.Context, o Options, cfgA, cfgB *rest.Config, metrics []kubernetes.Interface) (costPhaseResult, error) {
	a, err := costClient(cfgA, "fanout-bench-cost-A")
	if err != nil {
		return costPhaseResult{}, err
	}
	b, err := costClient(cfgB, "fanout-bench-cost-B")
	if err != nil {
		return costPhaseResult{}, err
	}
	for _, c := range []typedcorev1.ConfigMapInterface{a, b} {
		if _, err := c.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return costPhaseResult{}, fmt.Errorf("first request: %w", err)
		}
	}
	if o.Warmup > 0 {
		costWorkload(ctx, o, a, b, o.Warmup)
	}
	before, err := apiserverCPU(ctx, metrics)
	if err != nil {
		return costPhaseResult{}, err
	}
	res := costPhaseResult{start: time.Now()}
	res.Streams = costWorkload(ctx, o, a, b, o.CostPhase)
	after, err := apiserverCPU(ctx, metrics)
	if err != nil {
		return costPhaseResult{}, err
	}
	for i := range after {
		res.CPU = append(res.CPU, after[i]-before[i])
	}
	return res, ctx.Err()
}

func costClient(cfg *rest.Config, agent string) (typedcorev1.ConfigMapInterface, error) {
	cfg = rest.CopyConfig(cfg)
	// No client-side throttling: the schedule sets the rate.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	// The user agent tells the two clients apart in the apiservers' logs.
	cfg.UserAgent = agent
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return cs.CoreV1().ConfigMaps(costNamespace), nil
}

// costWorkload runs, for d, client A's GETs and LISTs and client B's LISTs,
// each stream open loop at its own rate, all at once.
func costWorkload(ctx context.Context, o Options, a, b typedcorev1.ConfigMapInterface, d time.Duration) []CostStream {
	var n atomicCounter
	get := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := a.Get(ctx, fmt.Sprintf("cm-%d", n.next()%int64(o.CostObjects)), metav1.GetOptions{})
		return err
	}
	list := func(c typedcorev1.ConfigMapInterface) requestFunc {
		return func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			l, err := c.List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) < o.CostObjects {
				err = fmt.Errorf("LIST returned %d ConfigMaps, want %d", len(l.Items), o.CostObjects)
			}
			return err
		}
	}
	streams := []struct {
		name string
		rate float64
		do   requestFunc
	}{
		{"A GET", o.CostGetRate, get},
		{"A LIST", o.CostListRateA, list(a)},
		{"B LIST", o.CostListRateB, list(b)},
	}
	out := make([]CostStream, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		out[i] = CostStream{Name: s.name, Offered: s.rate}
		if s.rate <= 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lr := OpenLoop(ctx, s.do, s.rate, d, o.MaxInflight)
			out[i].Sent, out[i].OK, out[i].Errors, out[i].Achieved = lr.Sent, lr.OK, lr.Errors, float64(lr.OK)/d.Seconds()
			if lr.FirstErr != nil {
				out[i].FirstErr = lr.FirstErr.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// apiserverCPU reads process_cpu_seconds_total from each apiserver's own
// /metrics.
func apiserverCPU(ctx context.Context, metrics []kubernetes.Interface) ([]float64, error) {
	out := make([]float64, len(metrics))
	for i, cs := range metrics {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("apiserver %d /metrics: %w", i+1, err)
		}
		if out[i], err = processCPUSeconds(bytes.NewReader(body)); err != nil {
			return nil, fmt.Errorf("apiserver %d /metrics: %w", i+1, err)
		}
	}
	return out, nil
}

// processCPUSeconds is the value of process_cpu_seconds_total in a
// Prometheus text exposition. A body without it is an error, not zero: a
// zero would read as an idle apiserver.
func processCPUSeconds(body io.Reader) (float64, error) {
	const name = "process_cpu_seconds_total"
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(body)
	if err != nil {
		return 0, fmt.Errorf("parsing the metrics: %w", err)
	}
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) != 1 {
		return 0, fmt.Errorf("want one sample of %s, found %d", name, len(f.GetMetric()))
	}
	m := f.GetMetric()[0]
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), nil
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), nil
	}
	return 0, fmt.Errorf("%s is a %s, want a counter", name, f.GetType())
}

// maxMinRatio is the largest of xs over the smallest: 1 is a perfect
// balance. It is NaN without values or when the smallest is not positive
// (no ratio to speak of).
func maxMinRatio(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs[1:] {
		lo, hi = min(lo, x), max(hi, x)
	}
	if lo <= 0 {
		return math.NaN()
	}
	return hi / lo
}

func fmtCPUs(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " / ")
}

// renderCostBalance writes section 6; command is how the run was started.
func renderCostBalance(b *strings.Builder, r *CostBalanceResult, command string) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## 6. Apiserver CPU under a mixed GET/LIST workload (e2e control plane)\n\n")
	if r == nil {
		p("Not measured (not in a default run). Run it alone with `make bench BENCH_ARGS='-sections costbalance -out /tmp/costbalance.md'`: without -out it rewrites this whole file.\n")
		return
	}
	p("Does balancing by request count spread the apiservers' work when requests differ in cost? ")
	p("%d ConfigMaps of %d bytes in one namespace; client A (client-go, JSON) sends GETs of one of them at %s req/s and LISTs of all at %s req/s, client B only LISTs of all at %s req/s, each stream open loop, against etcd and %d kube-apiservers (%s) of the e2e harness. ",
		r.Objects, r.ObjectBytes, fmtRate(r.GetRate), fmtRate(r.ListRateA), fmtRate(r.ListRateB), len(r.APIServers), strings.Join(r.APIServers, ", "))
	p("Both clients go through one proxy (fanout, or HAProxy L7 with `balance leastconn` or `balance roundrobin`), one target after the other on the same control plane, each for a %s warm-up and a %s phase. ", r.Warmup, r.Phase)
	p("**direct** is client-go straight to an apiserver, what an L4 balancer pinning each client's connection gives: A to apiserver 1, B to apiserver 2. ")
	p("CPU is each apiserver's `process_cpu_seconds_total` (its own /metrics) gained during the phase, so it includes each apiserver's background work; requests are the target's user's GETs and LISTs each apiserver served during the phase, from the audit logs.\n\n")
	p("Command: %s. Load average (1, 5, 15 min) at the start of the section %s, at its end %s.\n\n", command, r.LoadStart, r.LoadEnd)
	p("### Apiserver CPU under a mixed GET/LIST workload\n\n")
	p("| target | CPU s per apiserver | max/min | GET + LIST served per apiserver |\n| --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		var served []string
		for i := range row.CPU {
			served = append(served, fmt.Sprintf("%s + %s", at(row.Gets, i), at(row.Lists, i)))
		}
		p("| %s | %s | %s | %s |\n", row.Target, fmtCPUs(row.CPU), fmtF(row.Ratio(), 2), strings.Join(served, " / "))
	}
	p("\nThe workload as sent (successful requests per second over the phase):\n\n")
	p("| target | stream | offered (req/s) | sent | errors | achieved (req/s) |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		for _, s := range row.Streams {
			p("| %s | %s | %s | %d | %d | %.2f |\n", row.Target, s.Name, fmtRate(s.Offered), s.Sent, s.Errors, s.Achieved)
		}
	}
	for _, row := range r.Rows {
		for _, s := range row.Streams {
			if s.FirstErr != "" {
				p("\nFirst error of %s via %s: `%s`\n", s.Name, row.Target, s.FirstErr)
			}
		}
	}
}

func at(xs []int, i int) string {
	if i < len(xs) {
		return fmt.Sprint(xs[i])
	}
	return "—"
}

func fmtRate(r float64) string { return fmt.Sprintf("%g", r) }
