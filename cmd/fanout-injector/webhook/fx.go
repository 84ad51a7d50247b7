package webhook

import (
	"log/slog"

	"go.uber.org/fx"
)

// Module runs the admission webhook. The app supplies a Config (validated),
// Limits, a ServerConfig, a CertificateSource, a prometheus.Registerer and
// a *slog.Logger.
var Module = fx.Module("injector",
	fx.Provide(
		NewMetrics,
		func(c Config, m *Metrics, l Limits, p Params) *Handler { return NewHandler(c, m, p.Log, l) },
		func(c ServerConfig, h *Handler, certs CertificateSource, p Params) *Server {
			return NewServer(c, h, certs, p.Log)
		},
	),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.StartStopHook(s.Start, s.Stop))
	}),
)

// Params are the shared dependencies.
type Params struct {
	fx.In

	Log *slog.Logger
}
