package admin

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module serves the admin endpoints. The app supplies Config, a State, a
// prometheus.Gatherer and a *slog.Logger, and optionally a ResolverStatus,
// a Cost and a prometheus.Registerer for the server's own metrics.
var Module = fx.Module("admin",
	fx.Provide(
		// The hook is appended where the server is built, so whatever
		// depends on *Server starts after it and stops before it.
		func(p Params) (*Server, error) {
			h := NewHandler(p.State, p.Gatherer, p.Resolver)
			if p.Cost != nil {
				h = WithCost(h, p.Cost)
			}
			if p.Config.EnablePprof {
				h = WithPprof(h)
			}
			s := NewServer(p.Config, p.Startup.Wrap(h), p.Log)
			if p.Registerer != nil {
				for _, c := range s.Collectors() {
					if err := p.Registerer.Register(c); err != nil {
						return nil, err
					}
				}
			}
			p.Lifecycle.Append(fx.StartStopHook(s.Start, s.Stop))
			return s, nil
		},
	),
	// Serves even when nothing depends on the server.
	fx.Invoke(func(*Server) {}),
)

// Params are the admin server's dependencies.
type Params struct {
	fx.In

	Lifecycle fx.Lifecycle
	Config    Config
	State     State
	Gatherer  prometheus.Gatherer
	// Registerer takes the admin server's own metrics when supplied.
	Registerer prometheus.Registerer `optional:"true"`
	Log        *slog.Logger
	Resolver   ResolverStatus `optional:"true"`
	// Cost serves /debug/cost when supplied.
	Cost Cost `optional:"true"`
	// Startup serves /startupz when supplied.
	Startup *Startup `optional:"true"`
}
