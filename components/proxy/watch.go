package proxy

import (
	"github.com/fanout-dev/fanout/components/watch"
)

// SetRebalancer makes the handler track watches for r. Call it before the
// server starts; nil (the default) leaves watch bodies unwrapped.
func (h *Handler) SetRebalancer(r *watch.Rebalancer) { h.watch.SetRebalancer(r) }
