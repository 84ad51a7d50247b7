package sidecar

import (
	"strconv"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/balancer"
)

// addZoneFlags registers the zone placement flags (issue 34), a block of
// their own. Their values are checked by the balancer's and the
// resolver's Validate, through the engine's.
func (c *Config) addZoneFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Engine.Balancer.Zone, "zone", c.Engine.Balancer.Zone,
		"This fanout's topology zone, for --zone-policy. The injector passes the pod's topology.kubernetes.io/zone label, which kube-apiserver copies from the node at binding (PodTopologyLabelsAdmission), through the downward API. Empty: unknown, and placement is off.")
	fs.StringVar(&c.Engine.Balancer.ZonePolicy, "zone-policy", c.Engine.Balancer.ZonePolicy,
		"Zone placement: off (every apiserver alike); same-zone-first (only apiservers in --zone while it has --zone-min-endpoints usable ones, as trafficDistribution PreferSameZone); "+
			"spill-over (as Envoy's zone-aware routing: keep the share of requests the zone's healthy apiservers can take at an even load per apiserver, spill the rest to the other zones by their spare capacity). Watches and their rebalancing follow it.")
	fs.IntVar(&c.Engine.Balancer.ZoneMinEndpoints, "zone-min-endpoints", c.Engine.Balancer.ZoneMinEndpoints,
		"Usable apiservers --zone must have before --zone-policy prefers it; with fewer, requests go to every apiserver. The default "+strconv.Itoa(balancer.DefaultZoneMinEndpoints)+" never pins the client to a single apiserver; 1 allows it.")
	fs.StringVar(&c.Engine.EndpointZones, "endpoint-zones", c.Engine.EndpointZones,
		"Zones of the --endpoints that discovery gives none (static lists, dns:///): comma-separated KEY=ZONE, KEY a CIDR, an IP, host:port, a host or https://host:port; the first match wins. "+
			"EndpointSlice endpoints carry their own zones.")
}
