// Package logging builds the process logger of fanout's binaries from
// their --log-format and -v flags. It lives outside components/ so that
// fanout-injector does not link the sidecar's packages for one function.
package logging

import (
	"io"
	"log/slog"
)

// LevelRequest is the level of the sidecar's one line per request, as it
// ends (components/proxy): below slog.LevelDebug, so that -v 1 keeps its
// debug lines without a line per request. slog names it DEBUG-4.
const LevelRequest = slog.LevelDebug - 4

// RequestVerbosity is the -v that turns LevelRequest on: Kubernetes'
// debug verbosity. kube-apiserver's own line per request (httplog) is at
// -v 3; fanout keeps -v 2 and 3 free of per-request lines so that a busy
// client's log stays readable below 4.
const RequestVerbosity = 4

// New returns a logger writing to w: JSON for format "json", text
// otherwise; debug records from verbosity 1, and from RequestVerbosity
// one line per request (LevelRequest). Nothing is logged per request
// below it.
func New(format string, verbosity int, w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	switch {
	case verbosity >= RequestVerbosity:
		level = LevelRequest
	case verbosity >= 1:
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
