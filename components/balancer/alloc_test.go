package balancer

import (
	"fmt"
	"testing"
	"time"
)

// TestPickDoesNotAllocate guards issue 9's target: Pick and Done run on
// every request, and the proxy relies on them allocating nothing.
func TestPickDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation changes allocations")
	}
	infos := []struct {
		name string
		info PickInfo
	}{
		{"get", PickInfo{Kind: Short, Class: ClassGet}},
		{"watch", PickInfo{Kind: Long}},
		{"list retried elsewhere", PickInfo{Kind: Short, Class: ClassList, Avoid: "10.0.0.2:6443"}},
		{"unloaded", PickInfo{Kind: Short, Unloaded: true, Avoid: "10.0.0.1:6443"}},
		{"oldest", PickInfo{Kind: Long, Oldest: true}},
	}
	for _, pol := range policies {
		for _, zp := range []string{ZonePolicyOff, ZonePolicySameZoneFirst, ZonePolicySpillOver} {
			for _, tc := range infos {
				info := tc.info
				t.Run(fmt.Sprintf("%s/%s/%s", pol, zp, tc.name), func(t *testing.T) {
					b, err := New(Config{Policy: pol, Zone: "a", ZonePolicy: zp, ZoneMinEndpoints: 1})
					if err != nil {
						t.Fatal(err)
					}
					// a,a,b with the second one ejected: spill-over then
					// draws the zone of every short request.
					b.Update(endpoints("10.0.0.1:6443@a", "10.0.0.2:6443@a", "10.0.0.3:6443@b"))
					ejectOnly(t, b, "10.0.0.2:6443")
					di := DoneInfo{StatusCode: 200, Latency: 5 * time.Millisecond}
					allocs := testing.AllocsPerRun(200, func() {
						p, err := b.Pick(info)
						if err != nil {
							t.Fatal(err)
						}
						p.Done(di)
						p.Done(di) // the guarded second call must not allocate either
					})
					if allocs != 0 {
						t.Errorf("Pick+Done allocates %v times per request, want 0", allocs)
					}
				})
			}
		}
	}
}

// TestNewPickDoneOnce checks the Picks fakes make: Done reaches the hook
// once however often it is called, through any copy, and a zero Pick's Done does nothing.
func TestNewPickDoneOnce(t *testing.T) {
	var got []DoneInfo
	p := NewPick(NewEndpoint("a:1"), func(di DoneInfo) { got = append(got, di) })
	c := p
	p.Done(DoneInfo{StatusCode: 200})
	p.Done(DoneInfo{StatusCode: 500})
	c.Done(DoneInfo{StatusCode: 500})
	if len(got) != 1 || got[0].StatusCode != 200 {
		t.Errorf("hook got %+v, want the first DoneInfo only", got)
	}
	var zero Pick
	zero.Done(DoneInfo{}) // must not panic
}

// TestPickCopiesDoneOnce: a Pick is a value, and every copy of it shares
// one ticket. Done through two copies releases the request once, and a
// stale copy's Done, after its ticket went to a new pick, leaves that
// pick's request counted.
func TestPickCopiesDoneOnce(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.Update(endpoints("10.0.0.1:6443"))
	e := b.current.Load().eps[0]
	inflight := func() int64 { return e.inflight[kindIndex(Short)].Load() }

	p, err := b.Pick(PickInfo{Kind: Short, Class: ClassGet})
	if err != nil {
		t.Fatal(err)
	}
	stale := p // a copy, as a struct field or a closure would hold it
	p.Done(DoneInfo{StatusCode: 200})
	stale.Done(DoneInfo{StatusCode: 200})
	if n := inflight(); n != 0 {
		t.Fatalf("in flight after Done on two copies = %d, want 0", n)
	}
	for range 100 { // the pool hands the ticket out again, sooner or later
		next, err := b.Pick(PickInfo{Kind: Short, Class: ClassGet})
		if err != nil {
			t.Fatal(err)
		}
		stale.Done(DoneInfo{StatusCode: 200})
		if n := inflight(); n != 1 {
			t.Fatalf("in flight after a stale copy's Done = %d, want 1: it released a newer pick", n)
		}
		next.Done(DoneInfo{StatusCode: 200})
	}
	if n := inflight(); n != 0 {
		t.Errorf("in flight at the end = %d, want 0", n)
	}
}
