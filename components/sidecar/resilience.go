package sidecar

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/proxy"
)

// ResilienceOptions are the flags of outlier detection, slow start, the
// retry budget and the probe thresholds (docs/resilience.md).
type ResilienceOptions struct {
	MaxEjectedFraction  float64
	ConsecutiveFailures int
	SlowStart           time.Duration
	RetryBudget         float64
	RetryBudgetMin      int
	ProbeRise           int
	ProbeFall           int
}

func defaultResilience() ResilienceOptions {
	// The library (package client) starts from the same balancer.Recommended.
	b := balancer.Recommended("")
	return ResilienceOptions{
		MaxEjectedFraction:  b.MaxEjectedFraction,
		ConsecutiveFailures: b.ConsecutiveFailures,
		SlowStart:           b.SlowStart,
		RetryBudget:         proxy.DefaultRetryBudgetRatio,
		RetryBudgetMin:      proxy.DefaultRetryBudgetMin,
		ProbeRise:           health.DefaultRise,
		ProbeFall:           health.DefaultFall,
	}
}

func (r *ResilienceOptions) addFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&r.MaxEjectedFraction, "max-ejected-fraction", r.MaxEjectedFraction,
		"Largest share of endpoints (rounded up) that passive outlier detection may eject at once; beyond it ejections are ignored. Endpoints failing /readyz or shutting down are always left out unless none is left.")
	fs.IntVar(&r.ConsecutiveFailures, "outlier-consecutive-failures", r.ConsecutiveFailures,
		"Consecutive 5xx answers, timeouts or broken connections that eject an endpoint (a refused connection ejects at once). Ejections last 1s, doubling up to 30s while the endpoint keeps failing.")
	fs.DurationVar(&r.SlowStart, "slow-start", r.SlowStart,
		"Window over which an endpoint that just became usable (added, ready again, back from an ejection) ramps from 10% to its full share of requests and new watches; 0 disables.")
	fs.Float64Var(&r.RetryBudget, "retry-budget", r.RetryBudget,
		"Retries to another endpoint (after a shutdown answer, a 429 or an unprocessed request) may add at most this fraction of the requests of the last 10s, plus --retry-budget-min.")
	fs.IntVar(&r.RetryBudgetMin, "retry-budget-min", r.RetryBudgetMin,
		"Retries allowed per 10s whatever the request rate.")
	fs.IntVar(&r.ProbeRise, "probe-rise", r.ProbeRise,
		"Passing /readyz probes in a row that bring a not-ready endpoint back.")
	fs.IntVar(&r.ProbeFall, "probe-fall", r.ProbeFall,
		"Failing /readyz probes in a row that take a ready endpoint out.")
}

func (r *ResilienceOptions) validate() error {
	var errs []error
	if err := r.balancer("").Validate(); err != nil {
		errs = append(errs, err)
	}
	if r.RetryBudget < 0 || r.RetryBudget > 1 {
		errs = append(errs, fmt.Errorf("--retry-budget must be within [0, 1], got %v", r.RetryBudget))
	}
	if r.RetryBudgetMin < 1 {
		errs = append(errs, fmt.Errorf("--retry-budget-min must be at least 1, got %d", r.RetryBudgetMin))
	}
	if r.ProbeRise < 1 || r.ProbeFall < 1 {
		errs = append(errs, fmt.Errorf("--probe-rise and --probe-fall must be at least 1, got %d and %d", r.ProbeRise, r.ProbeFall))
	}
	if r.ConsecutiveFailures < 1 {
		errs = append(errs, fmt.Errorf("--outlier-consecutive-failures must be at least 1, got %d", r.ConsecutiveFailures))
	}
	return errors.Join(errs...)
}

// balancer returns the balancer Config for policy.
func (r *ResilienceOptions) balancer(policy string) balancer.Config {
	return balancer.Config{
		Policy:              policy,
		MaxEjectedFraction:  r.MaxEjectedFraction,
		ConsecutiveFailures: r.ConsecutiveFailures,
		SlowStart:           r.SlowStart,
	}
}

// retryBudget returns the proxy's retry budget, as the flags say: a
// --retry-budget of 0 allows --retry-budget-min retries per window and no
// more.
func (r *ResilienceOptions) retryBudget() *proxy.RetryBudget {
	return &proxy.RetryBudget{Ratio: r.RetryBudget, Min: r.RetryBudgetMin, Window: proxy.DefaultRetryBudgetWindow}
}

func balancerConfig(o Options) balancer.Config { return o.Resilience.balancer(o.Balancer) }

// proberConfig returns the prober's Config; an interval of 0 turns
// probing off (engine.Config.Probe).
func proberConfig(o Options) health.Config {
	return health.Config{Interval: o.ProbeInterval, Rise: o.Resilience.ProbeRise, Fall: o.Resilience.ProbeFall}
}

// proxyConfig returns the handler's part of the proxy's Config: the retry
// budget. The listener's part is listenerConfig's.
func proxyConfig(o Options) proxy.Config {
	return proxy.Config{RetryBudget: o.Resilience.retryBudget()}
}
