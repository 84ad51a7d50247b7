package balancer

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSetReady(t *testing.T) {
	type report struct {
		addr  string
		ready bool
	}
	tests := []struct {
		name    string
		reports []report
		eject   []string   // ejected before the reports
		updates [][]string // endpoint sets after the reports
		// wantPicked is the set of endpoints picks may choose.
		wantPicked string
		wantStates map[string]string
		wantReady  bool
	}{
		{
			name:       "default ready",
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"a:1": StateReady, "b:1": StateReady, "c:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "not ready is skipped",
			reports:    []report{{"b:1", false}},
			wantPicked: "a:1,c:1",
			wantStates: map[string]string{"a:1": StateReady, "b:1": StateNotReady, "c:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "ready again takes traffic",
			reports:    []report{{"b:1", false}, {"b:1", true}},
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"b:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "unknown address is ignored",
			reports:    []report{{"z:1", false}},
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"a:1": StateReady, "b:1": StateReady, "c:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "not ready and ejected add up",
			eject:      []string{"b:1"},
			reports:    []report{{"a:1", false}},
			wantPicked: "c:1",
			wantStates: map[string]string{"a:1": StateNotReady, "b:1": StateEjected, "c:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "not ready wins over ejected",
			eject:      []string{"a:1"},
			reports:    []report{{"a:1", false}},
			wantPicked: "b:1,c:1",
			wantStates: map[string]string{"a:1": StateNotReady},
			wantReady:  true,
		},
		{
			name:       "all unusable: panic mode picks all",
			eject:      []string{"c:1"},
			reports:    []report{{"a:1", false}, {"b:1", false}},
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"a:1": StateNotReady, "b:1": StateNotReady, "c:1": StateEjected},
			wantReady:  false,
		},
		{
			name:       "survives an update that keeps the address",
			reports:    []report{{"b:1", false}},
			updates:    [][]string{{"b:1", "c:1", "d:1"}},
			wantPicked: "c:1,d:1",
			wantStates: map[string]string{"b:1": StateNotReady, "d:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "re-added address starts ready",
			reports:    []report{{"b:1", false}},
			updates:    [][]string{{"a:1"}, {"a:1", "b:1"}},
			wantPicked: "a:1,b:1",
			wantStates: map[string]string{"a:1": StateReady, "b:1": StateReady},
			wantReady:  true,
		},
	}
	for _, pol := range policies {
		for _, tt := range tests {
			t.Run(pol+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newTest(t, Config{Policy: pol}, 3, "a:1", "b:1", "c:1")
					ejectAll(t, b, tt.eject...)
					for _, r := range tt.reports {
						b.SetReady(r.addr, r.ready)
					}
					for _, u := range tt.updates {
						b.Update(endpoints(u...))
					}
					checkStates(t, b, tt.wantStates, tt.wantReady, tt.wantPicked)
				})
			})
		}
	}
}

// TestSetReadyAvoid checks that a retry's Avoid does not bring back a
// not-ready endpoint while another is usable.
func TestSetReadyAvoid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 4, "a:1", "b:1")
		b.SetReady("b:1", false)
		for range 50 {
			p, _ := b.Pick(PickInfo{Avoid: "a:1"})
			if p.Endpoint.Address() != "a:1" {
				t.Fatalf("picked %s, want the avoided but only ready a:1", p.Endpoint.Address())
			}
			p.Done(DoneInfo{StatusCode: 200})
		}
	})
}

func TestSetReadyMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1")
		b.SetReady("a:1", false)
		want := `
# HELP fanout_endpoint_ready 1 if the endpoint is eligible for picks, 0 while it is ejected, failing its readiness probe or draining.
# TYPE fanout_endpoint_ready gauge
fanout_endpoint_ready{endpoint="a:1"} 0
fanout_endpoint_ready{endpoint="b:1"} 1
` + endpointsSeries(0, 0, 1, 1)
		if err := testutil.CollectAndCompare(b.Collector(), strings.NewReader(want), "fanout_endpoint_ready", "fanout_endpoints"); err != nil {
			t.Error(err)
		}
	})
}
