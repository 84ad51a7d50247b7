package health

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module provides *Prober, started and stopped with the app, and registers
// its metrics. The app supplies Config, Upstream, Sink, *slog.Logger and a
// prometheus.Registerer; feeding it endpoint snapshots (Update) is left to
// whoever owns the resolver.
var Module = fx.Module("health",
	fx.Provide(newForFx),
	fx.Invoke(registerMetrics),
)

func newForFx(lc fx.Lifecycle, cfg Config, up Upstream, sink Sink, log *slog.Logger) (*Prober, error) {
	p, err := New(cfg, up, sink, log)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StartStopHook(p.Start, p.Stop))
	return p, nil
}

func registerMetrics(p *Prober, reg prometheus.Registerer) error {
	for _, c := range p.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
