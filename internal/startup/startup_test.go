package startup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
)

type leaf struct{}
type mid struct{}

// TestRunSaysTheRootCause: a constructor's error deep in the graph and a
// start hook's error are each logged as one line holding the error the
// code returned, without fx's trace, with the exit code explain gives.
func TestRunSaysTheRootCause(t *testing.T) {
	root := errors.New("--widget /etc/widget: no such file or directory; mount it")
	quiet := fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger })
	tests := []struct {
		name     string
		app      fx.Option
		explain  Explain
		wantCode int
		want     string
	}{
		{"constructor error", fx.Options(quiet,
			fx.Provide(func() (*leaf, error) { return nil, root }),
			fx.Provide(func(*leaf) *mid { return &mid{} }),
			fx.Invoke(func(*mid) {}),
		), nil, 1, root.Error()},
		{"fx.Error", fx.Options(quiet, fx.Error(root)), nil, 1, root.Error()},
		{"start hook error", fx.Options(quiet,
			fx.Invoke(func(lc fx.Lifecycle) {
				lc.Append(fx.StartHook(func() error { return fmt.Errorf("listen: %w", root) }))
			}),
		), nil, 1, "listen: " + root.Error()},
		{"explained as a bad flag", fx.Options(quiet,
			fx.Provide(func() (*leaf, error) { return nil, root }),
			fx.Invoke(func(*leaf) {}),
		), func(err error) (int, error) { return 2, fmt.Errorf("explained: %w", err) }, 2, "explained: " + root.Error()},
		{"multi-line error on one line", fx.Options(quiet, fx.Error(errors.Join(errors.New("first"), errors.New("second")))), nil, 1, "first; second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			if code := Run(fx.New(tt.app), log, "prog", tt.explain); code != tt.wantCode {
				t.Errorf("Run = %d, want %d", code, tt.wantCode)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d lines logged, want 1:\n%s", len(lines), buf.String())
			}
			want := fmt.Sprintf("level=ERROR msg=\"prog cannot start\" error=%q", tt.want)
			if !strings.Contains(lines[0], want) {
				t.Errorf("logged:\n%s\nwant it to contain:\n%s", lines[0], want)
			}
		})
	}
}

// TestRunStopsOnShutdown: Run returns the exit code fx.Shutdowner gives,
// after stopping the app.
func TestRunStopsOnShutdown(t *testing.T) {
	var stopped bool
	app := fx.New(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.Invoke(func(lc fx.Lifecycle, s fx.Shutdowner) {
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error { return s.Shutdown(fx.ExitCode(3)) },
				OnStop:  func(context.Context) error { stopped = true; return nil },
			})
		}),
	)
	if code := Run(app, slog.New(slog.DiscardHandler), "prog", nil); code != 3 || !stopped {
		t.Errorf("Run = %d, stopped %v; want 3, true", code, stopped)
	}
}
