// Package logging builds the process logger of fanout's binaries from
// their --log-format and -v flags. It lives outside components/ so that
// fanout-injector does not link the sidecar's packages for one function.
package logging

import (
	"io"
	"log/slog"
)

// New returns a logger writing to w: JSON for format "json", text
// otherwise; debug records from verbosity 1. Nothing is logged per
// request at the default level.
func New(format string, verbosity int, w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if verbosity >= 1 {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
