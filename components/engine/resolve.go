package engine

import (
	"context"

	"github.com/fanout-dev/fanout/components/apis"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/health"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/resolver"
)

// endpointSink receives resolver snapshots.
type endpointSink interface {
	Update([]resolver.Endpoint)
}

// poolRetainer drops what it keeps per endpoint (connection pools, the
// series of per-endpoint metrics) for endpoints that went away.
type poolRetainer interface {
	Retain(addresses []string)
}

// Compile-time checks that the parts meet the interfaces they are wired
// to.
var (
	_ endpointSink        = (*balancer.Balancer)(nil)
	_ endpointSink        = (*health.Prober)(nil)
	_ endpointSink        = (*apis.Discoverer)(nil)
	_ endpointSink        = (*resolver.Metrics)(nil)
	_ health.Sink         = (*balancer.Balancer)(nil)
	_ health.ResolveNower = (*resolver.DNS)(nil)
	_ poolRetainer        = (*proxy.Metrics)(nil)
)

// sinks returns who gets each snapshot, in order, and whose pools follow
// it. The balancer goes first so that it knows a new endpoint before the
// prober's first report about it; the pools last, as the prober's Update
// returns only once probes of removed endpoints have ended, so none of
// them can recreate a pool that Retain just dropped.
func (e *Engine) sinks() ([]endpointSink, []poolRetainer) {
	sinks := []endpointSink{e.balancer}
	if e.prober != nil {
		sinks = append(sinks, e.prober)
	}
	if e.discoverer != nil {
		sinks = append(sinks, e.discoverer)
	}
	sinks = append(sinks, e.resolved)
	pools := []poolRetainer{e.transports}
	if e.probes != nil {
		pools = append(pools, e.probes)
	}
	return sinks, append(pools, e.proxyMetrics)
}

// runResolver runs the resolver until ctx ends and feeds its snapshots to
// the sinks, then lets the pools drop removed endpoints. A resolver that
// fails leaves the last snapshot in place.
func (e *Engine) runResolver(ctx context.Context) {
	sinks, pools := e.sinks()
	e.logZone()
	err := e.resolver.Run(ctx, func(eps []resolver.Endpoint) {
		eps = e.zones.Apply(eps)
		addrs := make([]string, len(eps))
		var draining, zones []string
		for i, ep := range eps {
			addrs[i] = ep.Address
			if ep.Draining {
				draining = append(draining, ep.Address)
			}
			if ep.Zone != "" {
				zones = append(zones, ep.Address+"="+ep.Zone)
			}
		}
		attrs := []any{"endpoints", addrs}
		if len(draining) > 0 {
			attrs = append(attrs, "draining", draining)
		}
		if len(zones) > 0 {
			attrs = append(attrs, "zones", zones)
		}
		e.log.Info("endpoints updated", attrs...)
		for _, s := range sinks {
			s.Update(eps)
		}
		for _, p := range pools {
			p.Retain(addrs)
		}
		e.firstOnce.Do(func() { close(e.first) })
	})
	if err != nil && ctx.Err() == nil {
		e.log.Error("endpoint resolver stopped; keeping the last known endpoints", "error", err)
	}
}

// logZone says once, at start, where zone placement stands: with a zone
// policy and no zone of its own (--zone empty: the pod has no
// topology.kubernetes.io/zone label) placement is off.
func (e *Engine) logZone() {
	b := e.cfg.Balancer
	switch {
	case b.ZonePolicy == "" || b.ZonePolicy == balancer.ZonePolicyOff:
	case b.Zone == "":
		e.log.Info("zone placement is off: fanout's zone is unknown (--zone is empty; the injector sets it from the pod's topology.kubernetes.io/zone label)", "zone_policy", b.ZonePolicy)
	default:
		e.log.Info("zone placement", "zone", b.Zone, "zone_policy", b.ZonePolicy, "zone_min_endpoints", b.ZoneMinEndpoints)
	}
}
