package listener

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// recordingHandler is a Handler that answers 204 and counts what the
// server calls.
type recordingHandler struct {
	served, stopped, upgradesClosed atomic.Int32
	lastRequest                     atomic.Pointer[reqinfo.Request]
}

func (h *recordingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := reqinfo.RequestFrom(r.Context())
	if req == nil {
		http.Error(w, "no classification in the context", http.StatusInternalServerError)
		return
	}
	h.served.Add(1)
	h.lastRequest.Store(req)
	w.WriteHeader(http.StatusNoContent)
}

func (h *recordingHandler) StopLongRunning() { h.stopped.Add(1) }

func (h *recordingHandler) CloseUpgrades(context.Context) error {
	h.upgradesClosed.Add(1)
	return nil
}

// TestModule: the module provides a Server for the app's Handler whose
// start hook opens the listener and whose stop hook drains it, with its
// metrics in the app's registry.
func TestModule(t *testing.T) {
	h := &recordingHandler{}
	reg := prometheus.NewRegistry()
	var s *Server
	app := fxtest.New(t, Module,
		fx.Supply(Config{ListenAddress: "127.0.0.1:0"}),
		fx.Provide(func() Handler { return h }),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Populate(&s),
	)
	if s.Addr() != nil {
		t.Fatal("listening before the app started")
	}
	app.RequireStart()
	if s.Addr() == nil {
		t.Fatal("not listening after the app started: the start hook is missing")
	}
	resp, err := http.Get("http://" + s.Addr().String() + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("status %d, want the handler's 204", resp.StatusCode)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"fanout_rejected_total", "fanout_downstream_connections", "fanout_downstream_inflight_requests"} {
		if !names[n] {
			t.Errorf("%s not in the app's registry", n)
		}
	}
	app.RequireStop()
	if h.stopped.Load() == 0 || h.upgradesClosed.Load() == 0 {
		t.Errorf("after stop: StopLongRunning called %d times, CloseUpgrades %d; want both: the stop hook is missing",
			h.stopped.Load(), h.upgradesClosed.Load())
	}
}
