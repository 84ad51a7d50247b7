package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// RealAPIRow is one path to the real control plane.
type RealAPIRow struct {
	Target string
	User   string
	Runs   int
	// Served is how many of the user's requests each apiserver served,
	// from the audit logs, over all runs (health probes left out).
	Served       []int
	Sent, Errors int
	FirstErr     string
	Throughput   float64
	P50, P99     time.Duration
}

// RealAPIResult is section 2 of the report.
type RealAPIResult struct {
	APIServers []string
	Rate       float64
	Duration   time.Duration
	Rows       []RealAPIRow
}

// Row finds a row.
func (r *RealAPIResult) Row(target string) (RealAPIRow, bool) {
	if r == nil {
		return RealAPIRow{}, false
	}
	for _, x := range r.Rows {
		if x.Target == target {
			return x, true
		}
	}
	return RealAPIRow{}, false
}

// runRealAPI is section 2: a client-go client (GET and LIST of ConfigMaps at
// a fixed rate) against a real control plane of three apiservers, directly,
// through HAProxy and through fanout, each with a user of its own so the
// audit logs tell who served what.
func runRealAPI(ctx context.Context, o Options, dir string, logf func(string, ...any)) (*RealAPIResult, error) {
	if err := harness.SweepStale(); err != nil {
		logf("realapi: sweeping leftovers of earlier runs: %v", err)
	}
	cp, err := harness.Start(ctx, nil, harness.Options{Logf: logf})
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	defer cp.Close()
	res := &RealAPIResult{APIServers: cp.Endpoints(), Rate: o.APIRate, Duration: o.APIDuration}
	var servers []string
	for _, ep := range cp.Endpoints() {
		servers = append(servers, strings.TrimPrefix(ep, "https://"))
	}

	type path struct {
		user       string
		ck         *harness.CertKey
		kc         string
		sent, errs int
		firstErr   string
		thr        []float64
		p50, p99   []time.Duration
		runs       int
	}
	paths := map[string]*path{}
	for _, t := range o.Targets {
		user := "bench-" + t
		ck, err := cp.PKI.MintUser(user, "system:masters")
		if err != nil {
			return nil, err
		}
		kc := filepath.Join(dir, "kubeconfig-"+user)
		if err := cp.PKI.WriteKubeconfig(kc, cp.Endpoints()[0], ck); err != nil {
			return nil, err
		}
		paths[t] = &path{user: user, ck: ck, kc: kc}
	}
	// The objects every client reads.
	ns := "bench"
	if _, err := cp.AdminClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cp.AdminClient.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}

	for run := range o.Runs {
		for _, t := range rotated(o.Targets, run) {
			p := paths[t]
			logf("realapi: run %d/%d: %s", run+1, o.Runs, t)
			var cfg *rest.Config
			var stop func()
			switch t {
			case targetDirect:
				cfg, err = harness.RESTConfig(p.kc)
				stop = func() {}
			case targetHAProxy:
				var hp *Proc
				hp, err = StartHAProxy(ctx, dir, fmt.Sprintf("realapi-haproxy-run%d", run), servers, cp.PKI.CA.CertFile, p.ck.CertPEM, p.ck.KeyPEM, "")
				if err == nil {
					cfg, stop = &rest.Config{Host: hp.URL}, hp.Stop
				}
			case targetFanout, targetFanoutTLS, targetFanoutNoCost:
				var extra []string
				switch t {
				case targetFanoutTLS:
					// The harness reads the kubeconfig fanout writes:
					// https:// with the loopback CA and client certificate.
					extra = append(extra, "--listen-tls")
				case targetFanoutNoCost:
					extra = append(extra, "--cost-table-size=0")
				}
				var f *harness.Fanout
				f, err = cp.StartFanout(ctx, nil, fmt.Sprintf("bench-%s-run%d", t, run), p.kc, extra...)
				if err == nil {
					cfg, stop = f.Config, func() { _ = f.Stop() }
				}
			case targetLibrary:
				cfg, stop, err = wrapLibrary(p.kc, cp.Endpoints())
			default:
				err = fmt.Errorf("no real-apiserver setup for path %q", t)
			}
			if err != nil {
				return nil, fmt.Errorf("realapi %s: %w", t, err)
			}
			lr, err := clientGoLoad(ctx, cfg, ns, o.APIRate, o.Warmup, o.APIDuration, o.MaxInflight)
			stop()
			if err != nil {
				return nil, fmt.Errorf("realapi %s: %w", t, err)
			}
			s := Summarize(lr.Latencies)
			p.runs++
			p.sent += lr.Sent
			p.errs += lr.Errors
			if lr.FirstErr != nil && p.firstErr == "" {
				p.firstErr = lr.FirstErr.Error()
			}
			p.thr = append(p.thr, lr.Throughput())
			p.p50 = append(p.p50, s.P50)
			p.p99 = append(p.p99, s.P99)
			logf("realapi: %s: %.0f req/s, p50 %s p99 %s, %d errors", t, lr.Throughput(), s.P50, s.P99, lr.Errors)
		}
	}
	for _, t := range o.Targets {
		p := paths[t]
		served, err := cp.ServedPerAPIServer(harness.UserIs(p.user))
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, RealAPIRow{
			Target: t, User: p.user, Runs: p.runs, Served: served,
			Sent: p.sent, Errors: p.errs, FirstErr: p.firstErr,
			Throughput: Median(p.thr), P50: MedianDuration(p.p50), P99: MedianDuration(p.p99),
		})
	}
	return res, nil
}

// clientGoLoad sends rate requests per second with a client-go clientset,
// alternating GET of one of the ConfigMaps and a LIST of them: for warmup
// (not measured), then for d.
func clientGoLoad(ctx context.Context, cfg *rest.Config, ns string, rate float64, warmup, d time.Duration, maxInflight int) (LoadResult, error) {
	cfg = rest.CopyConfig(cfg)
	// No client-side throttling: the schedule sets the rate.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.UserAgent = "fanout-bench"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return LoadResult{}, err
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	if _, err := cms.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return LoadResult{}, fmt.Errorf("first request: %w", err)
	}
	var n atomicCounter
	do := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		i := n.next()
		if i%2 == 0 {
			_, err := cms.Get(ctx, fmt.Sprintf("cm-%d", i%20), metav1.GetOptions{})
			return err
		}
		_, err := cms.List(ctx, metav1.ListOptions{Limit: 50})
		return err
	}
	if warmup > 0 {
		OpenLoop(ctx, do, rate, warmup, maxInflight)
	}
	return OpenLoop(ctx, do, rate, d, maxInflight), nil
}
