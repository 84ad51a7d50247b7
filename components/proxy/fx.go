package proxy

import "go.uber.org/fx"

// Module provides the proxy's Metrics, Handler and Server and runs the
// server for the app's lifetime. The app supplies Config, a Picker (the
// balancer), an Upstream (the transports) and a prometheus.Registerer.
//
// Stop ends watches cleanly and then waits for short requests until the
// app's stop timeout (--shutdown-grace) expires.
var Module = fx.Module("proxy",
	fx.Provide(NewMetrics, New, NewServer),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.StartStopHook(s.Start, s.Stop))
	}),
)
