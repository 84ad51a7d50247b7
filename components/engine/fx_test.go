package engine

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

// TestModule: the module builds the engine from the supplied Config with
// the app's registry, runs its loops between the app's start and stop, and
// leaves nothing registered after the stop.
func TestModule(t *testing.T) {
	cfg, _ := testConfig(t)
	reg := prometheus.NewRegistry()
	var e *Engine
	app := fxtest.New(t, Module,
		fx.Supply(cfg, slog.New(slog.DiscardHandler), fx.Annotate(reg, fx.As(new(prometheus.Registerer)))),
		fx.Populate(&e))
	app.RequireStart()
	if !slices.Contains(e.Parts(), PartResolver) {
		t.Errorf("after the app started the engine runs %v, want its resolver loop", e.Parts())
	}
	if n, _ := testutil.GatherAndCount(reg); n == 0 {
		t.Error("no fanout_* series on the app's registry, want the engine's")
	}
	app.RequireStop()
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Errorf("%d series left registered after the app stopped, want 0", n)
	}
}
