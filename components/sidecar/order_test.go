package sidecar

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
)

// hookLog records which constructor appended each start and stop hook, in
// the order fx runs them.
type hookLog struct {
	mu            sync.Mutex
	starts, stops []string
}

func (l *hookLog) LogEvent(e fxevent.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e := e.(type) {
	case *fxevent.OnStartExecuting:
		l.starts = append(l.starts, e.CallerName)
	case *fxevent.OnStopExecuting:
		l.stops = append(l.stops, e.CallerName)
	}
}

// part names the part whose constructor appended a hook.
func part(caller string) string {
	for _, p := range []string{"components/engine.", "components/admin.", "components/listener.", "components/sidecar."} {
		if strings.Contains(caller, p) {
			return strings.TrimSuffix(strings.TrimPrefix(p, "components/"), ".")
		}
	}
	return caller
}

// TestStartOrderFollowsDependencies: the engine starts first, the admin
// server before the listener (so /readyz and /metrics answer while the
// listener drains), the kubeconfig hook last; stop is the reverse. The
// order comes from the dependencies, not from where App lists the parts.
func TestStartOrderFollowsDependencies(t *testing.T) {
	log := &hookLog{}
	f := startSidecarWith(t, "", "least-request", nil, fx.WithLogger(func() fxevent.Logger { return log }))
	f.app.RequireStop()
	var starts, stops []string
	for _, c := range log.starts {
		starts = append(starts, part(c))
	}
	for _, c := range log.stops {
		stops = append(stops, part(c))
	}
	want := []string{"engine", "admin", "listener", "sidecar"}
	if !slices.Equal(starts, want) {
		t.Errorf("start hooks ran in the order %v (callers %v), want %v", starts, log.starts, want)
	}
	// The kubeconfig hook has no stop hook.
	if wantStop := []string{"listener", "admin", "engine"}; !slices.Equal(stops, wantStop) {
		t.Errorf("stop hooks ran in the order %v (callers %v), want %v", stops, log.stops, wantStop)
	}
}
