// Package metrics provides the Prometheus registry shared by fanout's
// binaries: the Go runtime and process collectors and fanout_build_info.
// It lives outside components/ so that fanout-injector does not link the
// sidecar's packages for it.
package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
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
// the module version and VCS revision the binary was built from (as the Go
// toolchain recorded them) and the Go version. Dashboards join on it to
// tell sidecar versions apart during a rollout.
func buildInfo() prometheus.Collector {
	version, revision := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fanout_build_info",
		Help: "Always 1; the labels say which fanout build is running.",
		ConstLabels: prometheus.Labels{
			"version":   version,
			"revision":  revision,
			"goversion": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}
