package sidecar

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestZoneFlags: the zone flags write into the engine's Config, default
// to placement off with a minimum of 2, and a bad value is an error that
// names its flag.
func TestZoneFlags(t *testing.T) {
	parse := func(args ...string) *Config {
		t.Helper()
		c := NewConfig()
		fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
		c.AddFlags(fs)
		if err := fs.Parse(append([]string{"--kubeconfig=/k"}, args...)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	d := parse()
	if b := d.Engine.Balancer; b.Zone != "" || b.ZonePolicy != "off" || b.ZoneMinEndpoints != 2 || d.Engine.EndpointZones != "" {
		t.Errorf("defaults: zone %q, policy %q, min %d, endpoint zones %q; want \"\", off, 2, \"\"", b.Zone, b.ZonePolicy, b.ZoneMinEndpoints, d.Engine.EndpointZones)
	}
	c := parse("--zone=a", "--zone-policy=spill-over", "--zone-min-endpoints=1", "--endpoint-zones=10.0.0.0/8=a")
	if b := c.Engine.Balancer; b.Zone != "a" || b.ZonePolicy != "spill-over" || b.ZoneMinEndpoints != 1 || c.Engine.EndpointZones != "10.0.0.0/8=a" {
		t.Errorf("flags not bound: %+v, endpoint zones %q", b, c.Engine.EndpointZones)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--zone-policy=nearest"}, "--zone-policy"},
		{[]string{"--zone-policy=same-zone-first", "--zone-min-endpoints=0"}, "--zone-min-endpoints"},
		{[]string{"--zone=eu west"}, "--zone"},
		{[]string{"--endpoint-zones=10.0.0.0/8"}, "--endpoint-zones"},
	} {
		err := parse(tc.args...).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: Validate() = %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}
