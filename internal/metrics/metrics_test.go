package metrics

import (
	"testing"

	"github.com/fanout-dev/fanout/internal/version"
)

// TestBuildInfo: fanout_build_info carries what version.Get says, which
// `fanout version` prints.
func TestBuildInfo(t *testing.T) {
	mfs, err := NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := version.Get()
	want := map[string]string{"version": v.Version, "revision": v.Commit, "goversion": v.GoVersion}
	for _, mf := range mfs {
		if mf.GetName() != "fanout_build_info" {
			continue
		}
		got := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) {
			t.Errorf("fanout_build_info labels %v, want %v", got, want)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("fanout_build_info %s=%q, want %q", k, got[k], w)
			}
		}
		if g := mf.GetMetric()[0].GetGauge().GetValue(); g != 1 {
			t.Errorf("fanout_build_info = %v, want 1", g)
		}
		return
	}
	t.Fatal("no fanout_build_info")
}
