package balancer

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Module provides *Balancer. The
// application supplies the Config and a prometheus.Registerer; the module
// registers the endpoint collector with it. Feeding the balancer (calling
// Update from a resolver) is left to whoever owns the resolver.
var Module = fx.Module("balancer",
	fx.Provide(New),
	fx.Invoke(registerCollector),
)

func registerCollector(b *Balancer, reg prometheus.Registerer) error {
	return reg.Register(b.Collector())
}
