package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
)

// TestLogZone: one line at start says whether zone placement is on; with
// a policy and no zone of its own it says placement is off, and why.
func TestLogZone(t *testing.T) {
	for _, tc := range []struct {
		zone, policy string
		want         string // "" for no line
	}{
		{"", balancer.ZonePolicyOff, ""},
		{"a", "", ""},
		{"", balancer.ZonePolicySpillOver, "zone placement is off: fanout's zone is unknown"},
		{"a", balancer.ZonePolicySameZoneFirst, "zone=a zone_policy=same-zone-first zone_min_endpoints=2"},
	} {
		var buf bytes.Buffer
		e := &Engine{log: slog.New(slog.NewTextHandler(&buf, nil))}
		e.cfg.Balancer = balancer.Config{Zone: tc.zone, ZonePolicy: tc.policy, ZoneMinEndpoints: 2}
		e.logZone()
		lines := strings.Count(buf.String(), "\n")
		switch {
		case tc.want == "" && lines != 0:
			t.Errorf("zone %q, policy %q: logged %q, want nothing", tc.zone, tc.policy, buf.String())
		case tc.want != "" && (lines != 1 || !strings.Contains(buf.String(), tc.want)):
			t.Errorf("zone %q, policy %q: logged %q, want one line with %q", tc.zone, tc.policy, buf.String(), tc.want)
		}
	}
}
