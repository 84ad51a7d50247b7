package components

import (
	"io"
	"log/slog"
)

// NewLogger builds the process logger from --log-format and -v. Nothing is
// logged per request at the default level.
func NewLogger(o *Options, w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if o.Verbosity >= 1 {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
