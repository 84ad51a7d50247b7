package components

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

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
