package proxy

import (
	"log/slog"

	"go.uber.org/fx"
)

// Module provides the proxy's Metrics, Handler and Server and runs the
// server for the app's lifetime. The app supplies Config, a Picker (the
// balancer), an Upstream (the transports) and a prometheus.Registerer, and
// usually a *slog.Logger and an UpgradeDialer (the transports), which
// become Config.Log and Config.Upgrades unless those are set.
//
// Stop ends watches cleanly and then waits for short requests until the
// app's stop timeout (--shutdown-grace) expires.
var Module = fx.Module("proxy",
	fx.Decorate(withLogger),
	fx.Provide(NewMetrics, New, NewServer),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.StartStopHook(s.Start, s.Stop))
	}),
)

type loggerParams struct {
	fx.In

	Config   Config
	Log      *slog.Logger  `optional:"true"`
	Upgrades UpgradeDialer `optional:"true"`
}

// withLogger gives the module's Config the app's logger and upgrade
// dialer.
func withLogger(p loggerParams) Config {
	if p.Config.Log == nil {
		p.Config.Log = p.Log
	}
	if p.Config.Upgrades == nil {
		p.Config.Upgrades = p.Upgrades
	}
	return p.Config
}
