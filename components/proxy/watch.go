package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/proxy/watch"
)

// The watch features live in package watch. These names keep the API that
// components and client build the rebalancer with.
type (
	// WatchRebalancer is watch.Rebalancer.
	WatchRebalancer = watch.Rebalancer
	// RebalanceConfig is watch.RebalanceConfig.
	RebalanceConfig = watch.RebalanceConfig
	// LoadSource is watch.LoadSource.
	LoadSource = watch.LoadSource
)

// Defaults of RebalanceConfig.
const (
	DefaultRebalanceRate      = watch.DefaultRebalanceRate
	DefaultRebalanceTolerance = watch.DefaultRebalanceTolerance
	DefaultRebalanceMinAge    = watch.DefaultRebalanceMinAge
	DefaultRebalanceMargin    = watch.DefaultRebalanceMargin
	DefaultRebalanceInterval  = watch.DefaultRebalanceInterval
)

// NewWatchRebalancer is watch.NewRebalancer.
func NewWatchRebalancer(cfg RebalanceConfig, src LoadSource, reg prometheus.Registerer) (*WatchRebalancer, error) {
	return watch.NewRebalancer(cfg, src, reg)
}

// SetRebalancer makes the handler track watches for r. Call it before the
// server starts; nil (the default) leaves watch bodies unwrapped.
func (h *Handler) SetRebalancer(r *WatchRebalancer) { h.watch.SetRebalancer(r) }
