// Package startup runs a binary's fx application and reports why it did
// not start in one line: the root cause, without fx's dependency-injection
// trace (constructor names and source paths). A sidecar that exits during
// its start puts the client's pod in a crash loop, and that line is what
// kubectl logs shows.
package startup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.uber.org/dig"
	"go.uber.org/fx"
)

// RootCause is the error a constructor, invoked function or start hook
// returned, with the wrapping fx and dig add around it removed. Errors
// that do not come from fx are returned as they are.
func RootCause(err error) error {
	if err == nil {
		return nil
	}
	return dig.RootCause(err)
}

// Line is err on one line: errors.Join's and multi-line messages have
// their lines joined with "; ", so that a log line or a terminal line
// holds all of it.
func Line(err error) string {
	var parts []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// Explain turns a root cause into the exit code, 2 when a flag's value is
// at fault and 1 otherwise, and the message to log, in the terms of the
// binary's flags.
type Explain func(error) (code int, cause error)

// Run starts app, waits for SIGINT or SIGTERM (or fx.Shutdowner), stops
// it, and returns the process's exit code: 0 after a clean stop, else the
// code explain gives (1 when explain is nil). A failure, fx.New's
// included, is logged as one error-level line, msg "<program> cannot
// start" (or "... did not stop cleanly"), whose error attribute is
// explain(RootCause(err)) on one line; the whole fx error follows at
// debug level.
func Run(app *fx.App, log *slog.Logger, program string, explain Explain) int {
	if explain == nil {
		explain = func(err error) (int, error) { return 1, err }
	}
	fail := func(msg string, err error) int {
		code, cause := explain(RootCause(err))
		log.Error(program+" "+msg, "error", Line(cause))
		log.Debug("dependency-injection error", "error", err.Error())
		return code
	}
	// Start returns fx.New's error (app.Err()) at once, or the first
	// failing start hook's, after stopping the hooks that had started.
	startCtx, cancel := context.WithTimeout(context.Background(), app.StartTimeout())
	err := app.Start(startCtx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("the start took longer than %s: %w", app.StartTimeout(), err)
	}
	if err != nil {
		return fail("cannot start", err)
	}
	sig := <-app.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancel()
	if err := app.Stop(stopCtx); err != nil {
		return fail("did not stop cleanly", err)
	}
	return sig.ExitCode
}
