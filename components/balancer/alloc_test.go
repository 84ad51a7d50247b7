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
	infos := []PickInfo{
		{Kind: Short, Class: ClassGet},
		{Kind: Long},
		{Kind: Short, Class: ClassList, Avoid: "10.0.0.2:6443"},
		{Kind: Short, Unloaded: true, Avoid: "10.0.0.1:6443"},
		{Kind: Long, Oldest: true},
	}
	for _, pol := range policies {
		for _, info := range infos {
			t.Run(fmt.Sprintf("%s/%+v", pol, info), func(t *testing.T) {
				b, err := New(Config{Policy: pol})
				if err != nil {
					t.Fatal(err)
				}
				b.Update(endpoints("10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"))
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
