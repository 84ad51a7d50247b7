package certs

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module provides *Credentials from the *Upstream the app supplies (the
// app loads the kubeconfig itself, before fx starts, because flags and
// endpoint defaults depend on it), watches its files between start and
// stop, and registers *Metrics with the app's prometheus.Registerer.
var Module = fx.Module("certs",
	fx.Provide(NewMetrics, newForFx),
	fx.Invoke(func(m *Metrics, reg prometheus.Registerer) error { return reg.Register(m) }),
)

type fxParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	Upstream  *Upstream
	Metrics   *Metrics
	Log       *slog.Logger `optional:"true"`
}

func newForFx(p fxParams) (*Credentials, error) {
	c, err := NewCredentialsWithOptions(p.Upstream, Options{Log: p.Log, Metrics: p.Metrics})
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StartStopHook(c.Start, c.Stop))
	return c, nil
}
