package engine

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module runs the engine for an fx application: it builds the engine from
// the supplied Config with the app's registry and logger, starts it first
// and stops it last (everything that serves its handler depends on it).
var Module = fx.Module("engine",
	fx.Provide(newForApp),
)

// Params are what Module takes from the app.
type Params struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Config     Config
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

func newForApp(p Params) (*Engine, error) {
	cfg := p.Config
	cfg.Registerer, cfg.Log = p.Registerer, p.Log
	e, err := New(cfg)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{OnStart: e.Start, OnStop: e.Stop})
	return e, nil
}
