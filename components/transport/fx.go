package transport

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module provides *Transports, closes it on stop and registers its
// metrics. The app supplies Config, Credentials and a
// prometheus.Registerer.
var Module = fx.Module("transport",
	fx.Provide(newForFx),
	fx.Invoke(registerMetrics),
)

func newForFx(lc fx.Lifecycle, cfg Config, creds Credentials) (*Transports, error) {
	t, err := New(cfg, creds)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(t.Close))
	return t, nil
}

func registerMetrics(t *Transports, reg prometheus.Registerer) error {
	for _, c := range t.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
