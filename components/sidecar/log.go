package sidecar

import (
	"io"
	"log/slog"

	"github.com/fanout-dev/fanout/internal/logging"
)

// NewLogger builds the process logger from --log-format and -v.
func NewLogger(c *Config, w io.Writer) *slog.Logger {
	return logging.New(c.LogFormat, c.Verbosity, w)
}
