package admin

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module serves the admin endpoints. The app supplies Config, a State, a
// prometheus.Gatherer and a *slog.Logger, and optionally a ResolverStatus.
var Module = fx.Module("admin",
	fx.Provide(
		func(p Params) *Server {
			h := NewHandler(p.State, p.Gatherer, p.Resolver)
			if p.Config.EnablePprof {
				h = WithPprof(h)
			}
			return NewServer(p.Config, p.Startup.Wrap(h), p.Log)
		},
	),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.StartStopHook(s.Start, s.Stop))
	}),
)

// Params are the admin server's dependencies.
type Params struct {
	fx.In

	Config   Config
	State    State
	Gatherer prometheus.Gatherer
	Log      *slog.Logger
	Resolver ResolverStatus `optional:"true"`
	// Startup serves /startupz when supplied.
	Startup *Startup `optional:"true"`
}
