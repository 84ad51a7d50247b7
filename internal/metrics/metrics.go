// Package metrics provides the Prometheus registry shared by fanout's
// binaries: the Go runtime and process collectors and fanout_build_info.
// It lives outside components/ so that fanout-injector does not link the
// sidecar's packages for it.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/internal/version"
)

// Module provides one registry as both Registerer and Gatherer.
var Module = fx.Module("metrics",
	fx.Provide(
		NewRegistry,
		func(r *prometheus.Registry) prometheus.Registerer { return r },
		func(r *prometheus.Registry) prometheus.Gatherer { return r },
	),
)

// NewRegistry returns a registry with the Go runtime and process
// collectors and fanout_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	return reg
}

// buildInfo returns the constant fanout_build_info gauge: 1, labelled with
// the version and revision of version.Get (what `fanout version` prints:
// the values stamped at build, else those the Go toolchain recorded) and
// the Go version. Dashboards join on it to tell sidecar versions apart
// during a rollout.
func buildInfo() prometheus.Collector {
	v := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fanout_build_info",
		Help: "Always 1; the labels say which fanout build is running.",
		ConstLabels: prometheus.Labels{
			"version":   v.Version,
			"revision":  v.Commit,
			"goversion": v.GoVersion,
		},
	})
	g.Set(1)
	return g
}
