package listener

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module serves the app's Handler on the loopback listener: it builds a
// *Server from the supplied Config with the app's registry and logger,
// opens the listener on start and drains it on stop. Whatever the Handler
// depends on starts before it and stops after it.
var Module = fx.Module("listener",
	fx.Provide(newForApp),
)

// Params are what Module takes from the app.
type Params struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Config     Config
	Handler    Handler
	Registerer prometheus.Registerer
	Log        *slog.Logger `optional:"true"`
}

func newForApp(p Params) (*Server, error) {
	cfg := p.Config
	if cfg.Log == nil {
		cfg.Log = p.Log
	}
	m, err := NewMetrics(p.Registerer)
	if err != nil {
		return nil, err
	}
	s := New(cfg, p.Handler, m)
	p.Lifecycle.Append(fx.StartStopHook(s.Start, s.Stop))
	return s, nil
}
