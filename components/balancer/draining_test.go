package balancer

import (
	"testing"
	"testing/synctest"
)

func TestDraining(t *testing.T) {
	tests := []struct {
		name       string
		updates    [][]string // after the initial a:1,b:1,c:1
		notReady   []string   // probe reports after the updates
		wantPicked string
		wantStates map[string]string
		wantReady  bool
	}{
		{
			name:       "draining is not picked",
			updates:    [][]string{{"a:1", "-b:1", "c:1"}},
			wantPicked: "a:1,c:1",
			wantStates: map[string]string{"a:1": StateReady, "b:1": StateDraining, "c:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "undrained takes traffic again",
			updates:    [][]string{{"a:1", "-b:1", "c:1"}, {"a:1", "b:1", "c:1"}},
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"b:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "a passing probe does not undo draining",
			updates:    [][]string{{"a:1", "-b:1", "c:1"}},
			notReady:   []string{"a:1"},
			wantPicked: "c:1",
			wantStates: map[string]string{"a:1": StateNotReady, "b:1": StateDraining, "c:1": StateReady},
			wantReady:  true,
		},
		{
			name:       "new endpoint may arrive draining",
			updates:    [][]string{{"a:1", "b:1", "c:1", "-d:1"}},
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"d:1": StateDraining},
			wantReady:  true,
		},
		{
			name:       "all draining: panic mode picks all",
			updates:    [][]string{{"-a:1", "-b:1", "-c:1"}},
			wantPicked: "a:1,b:1,c:1",
			wantStates: map[string]string{"a:1": StateDraining, "b:1": StateDraining, "c:1": StateDraining},
			wantReady:  false,
		},
	}
	for _, pol := range policies {
		for _, tt := range tests {
			t.Run(pol+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newTest(t, Config{Policy: pol}, 5, "a:1", "b:1", "c:1")
					for _, u := range tt.updates {
						b.Update(endpoints(u...))
					}
					for _, a := range tt.notReady {
						b.SetReady(a, false)
					}
					// A passing probe of a draining endpoint must not revive it.
					for _, s := range b.Endpoints() {
						if s.Draining {
							b.SetReady(s.Address, true)
						}
					}
					checkStates(t, b, tt.wantStates, tt.wantReady, tt.wantPicked)
				})
			})
		}
	}
}

// TestDrainingKeepsInflight checks that draining an endpoint keeps its
// *Endpoint, so a request in flight finishes on the same counters.
func TestDrainingKeepsInflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1")
		p, err := b.Pick(PickInfo{Kind: Long})
		if err != nil {
			t.Fatal(err)
		}
		b.Update(endpoints("-a:1", "b:1"))
		if s := status(t, b, "a:1"); s.InflightLong != 1 || s.State != StateDraining {
			t.Fatalf("after draining: %+v, want one long request in flight and state draining", s)
		}
		p.Done(DoneInfo{StatusCode: 200})
		if s := status(t, b, "a:1"); s.InflightLong != 0 || s.RequestsTotal != 1 {
			t.Fatalf("after Done: %+v, want the request counted on the draining endpoint", s)
		}
	})
}
