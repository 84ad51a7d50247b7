package sidecar

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/watch"
)

// RebalanceOptions are the flags of active watch rebalancing
// (docs/resilience.md, "Watch rebalancing").
type RebalanceOptions struct {
	Enabled   bool
	Rate      float64
	Tolerance float64
}

func defaultRebalance() RebalanceOptions {
	return RebalanceOptions{Enabled: true, Rate: watch.DefaultRebalanceRate, Tolerance: watch.DefaultRebalanceTolerance}
}

func (r *RebalanceOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&r.Enabled, "watch-rebalance", r.Enabled,
		"End watches on an apiserver that holds more than its share, between two events, so that clients re-watch (without re-listing) on the least loaded one; "+
			"only watches past their initial events, at least 10s old, that have passed on an event newer than the other apiservers' readiness. Never exec, attach, port-forward or logs.")
	fs.Float64Var(&r.Rate, "watch-rebalance-rate", r.Rate,
		"Most watches --watch-rebalance ends per second, on average.")
	fs.Float64Var(&r.Tolerance, "watch-rebalance-tolerance", r.Tolerance,
		"Watches are moved while the most and least loaded apiservers differ by more than this fraction of the fair share (and by more than 1).")
}

func (r RebalanceOptions) config() watch.RebalanceConfig {
	return watch.RebalanceConfig{Rate: r.Rate, Tolerance: r.Tolerance}
}

func (r RebalanceOptions) validate() error {
	if !r.Enabled {
		return nil
	}
	if r.Rate <= 0 {
		return fmt.Errorf("--watch-rebalance-rate must be above 0, got %v (to turn rebalancing off, use --watch-rebalance=false)", r.Rate)
	}
	return r.config().Validate()
}
