package resolver

import (
	"slices"
	"strings"
	"testing"
)

func TestParseZones(t *testing.T) {
	z, err := ParseZones("10.0.1.0/24=a, https://10.0.2.5:6443=b,apiserver-3=c,api.example:7443=d,[fd00::1]:6443=e,10.0.2.0/24=f")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{
		"10.0.1.7:6443":    "a",
		"10.0.2.5:6443":    "b", // the first rule that matches wins
		"10.0.2.5:443":     "f",
		"APISERVER-3:6443": "c",
		"api.example:7443": "d",
		"api.example:6443": "",
		"[fd00::1]:6443":   "e",
		"192.168.0.1:6443": "",
		"not-an-address":   "",
	} {
		if got := z.zoneOf(addr); got != want {
			t.Errorf("zone of %s = %q, want %q", addr, got, want)
		}
	}
	for _, bad := range []string{"10.0.1.0/24", "=a", "10.0.1.0/24=", "10.0.1.0/24=eu west", "a b=c", "[fd00::1=a"} {
		if _, err := ParseZones(bad); err == nil || !strings.Contains(err.Error(), "--endpoint-zones") {
			t.Errorf("ParseZones(%q) = %v, want an error naming --endpoint-zones", bad, err)
		}
	}
}

// TestZonesApply: the rules fill in zones a resolver does not know and
// leave the ones it knows, on a copy.
func TestZonesApply(t *testing.T) {
	z, err := ParseZones("10.0.0.0/8=a")
	if err != nil {
		t.Fatal(err)
	}
	in := []Endpoint{{Address: "10.0.0.1:6443"}, {Address: "10.0.0.2:6443", Zone: "b"}, {Address: "192.168.0.1:6443"}}
	got := z.Apply(in)
	want := []Endpoint{{Address: "10.0.0.1:6443", Zone: "a"}, {Address: "10.0.0.2:6443", Zone: "b"}, {Address: "192.168.0.1:6443"}}
	if !slices.Equal(got, want) {
		t.Errorf("Apply = %+v, want %+v", got, want)
	}
	if in[0].Zone != "" {
		t.Errorf("the resolver's own slice was modified: %+v", in[0])
	}
	if got := (Zones{}).Apply(in); &got[0] != &in[0] {
		t.Errorf("Apply with no rules copied the snapshot")
	}
}
