package sidecar

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/components/proxy"
)

// TestSidecarRunsTheEngine: the sidecar's one provide builds the engine,
// its OnStart hook runs the engine's loops and OnStop ends them, after the
// listener in front of it (fx stops in reverse order) so that the
// listener's short requests drain against a running engine.
func TestSidecarRunsTheEngine(t *testing.T) {
	var e *engine.Engine
	stopped := false
	f := startSidecar(t, "", "least-request", fx.Populate(&e),
		// Appended last, so stopped first: it sees what the engine's
		// stop would end still running.
		fx.Invoke(func(lc fx.Lifecycle) {
			lc.Append(fx.StopHook(func() {
				stopped = true
				if _, err := e.RoundTripper().RoundTrip(httptest.NewRequest(http.MethodGet, "https://x/api/v1/namespaces/default/configmaps/x", nil).WithContext(context.Background())); err != nil {
					t.Errorf("a request while the app stops, before the engine does: %v", err)
				}
			}))
		}))
	if parts := e.Parts(); !slices.Contains(parts, engine.PartResolver) || !slices.Contains(parts, engine.PartStateLog) {
		t.Fatalf("the started app's engine runs %v, want its loops", parts)
	}
	s := f.proxy
	resp, err := http.Get("http://" + s.Addr().String() + "/api/v1/namespaces/default/configmaps/x")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("through the listener: status %d, want 200", resp.StatusCode)
	}
	f.app.RequireStop()
	if !stopped {
		t.Error("the last stop hook did not run")
	}
	if _, err := e.RoundTripper().RoundTrip(httptest.NewRequest(http.MethodGet, "https://x/api/v1/pods", nil).WithContext(context.Background())); !errors.Is(err, proxy.ErrStopped) {
		t.Errorf("a request after the app stopped: %v, want proxy.ErrStopped (the engine's OnStop ran)", err)
	}
}
