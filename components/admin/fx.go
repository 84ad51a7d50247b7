package admin

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module serves the admin endpoints. The app supplies Config, a State, a
// prometheus.Gatherer and a *slog.Logger.
var Module = fx.Module("admin",
	fx.Provide(
		func(state State, g prometheus.Gatherer, cfg Config, log *slog.Logger) *Server {
			return NewServer(cfg, NewHandler(state, g), log)
		},
	),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.StartStopHook(s.Start, s.Stop))
	}),
)
