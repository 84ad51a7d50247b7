package components

import (
	"log/slog"

	"k8s.io/klog/v2"
)

// routeKlog sends what client-go and apimachinery log through klog (the
// request-info parser, the EndpointSlice informer's reflector) to fanout's
// own logger, so every line has fanout's format and level and none goes
// to stderr unstructured. klog's verbose levels map to slog levels below
// Info, so they show only with -v.
func routeKlog(log *slog.Logger) { klog.SetSlogLogger(log) }
