package loops

import (
	"context"
	"slices"
	"testing"
)

// TestSync: loops start for new addresses, the removed ones are stopped
// and waited for before Sync returns, and Refresh reaches only its own.
func TestSync(t *testing.T) {
	var s Set
	started := make(chan string, 4)
	refreshed := make(chan string, 4)
	ended := map[string]bool{}
	endedCh := make(chan string, 4)
	run := func(ctx context.Context, addr string, refresh <-chan struct{}) {
		started <- addr
		for {
			select {
			case <-ctx.Done():
				endedCh <- addr
				return
			case <-refresh:
				refreshed <- addr
			}
		}
	}
	var announced []string
	stopped := s.Sync(Keep(true, []string{"a", "b"}), run, func(a string) { announced = append(announced, a) })
	if len(stopped) != 0 || s.Len() != 2 {
		t.Fatalf("stopped %v, %d running, want none stopped and 2 running", stopped, s.Len())
	}
	slices.Sort(announced)
	if !slices.Equal(announced, []string{"a", "b"}) {
		t.Errorf("starting called for %v, want a and b", announced)
	}
	got := []string{<-started, <-started}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("started %v", got)
	}
	s.Refresh("b")
	if r := <-refreshed; r != "b" {
		t.Errorf("refreshed %s, want b", r)
	}
	stopped = s.Sync(Keep(true, []string{"b"}), run, nil)
	// Sync waited for a's loop: its end is already sent.
	select {
	case a := <-endedCh:
		ended[a] = true
	default:
		t.Fatal("Sync returned before the stopped loop ended")
	}
	if !slices.Equal(stopped, []string{"a"}) || !ended["a"] || s.Len() != 1 {
		t.Fatalf("stopped %v, ended %v, %d running; want a stopped and ended, 1 running", stopped, ended, s.Len())
	}
	if stopped = s.Sync(Keep(false, []string{"b"}), run, nil); !slices.Equal(stopped, []string{"b"}) || s.Len() != 0 {
		t.Fatalf("not running: stopped %v, %d running; want b stopped, none running", stopped, s.Len())
	}
}
