// Command fanout-injector is a mutating admission webhook that adds the
// fanout sidecar to pods labelled fanout.dev/inject="true" and points their
// client at it. See docs/injector.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
	"github.com/fanout-dev/fanout/internal/logging"
	"github.com/fanout-dev/fanout/internal/metrics"
	"github.com/fanout-dev/fanout/internal/serve"
	"github.com/fanout-dev/fanout/internal/startup"
	"github.com/fanout-dev/fanout/internal/version"
)

// main exits 0 after --help, --version or a clean stop, 2 for bad flags or
// arguments, and 1 when the injector cannot start or stop; each failure
// says why on one line of stderr.
func main() {
	o := newOptions()
	fs := pflag.NewFlagSet("fanout-injector", pflag.ContinueOnError)
	// --help is printed below, to stdout; errors on one line of stderr.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	showVersion := fs.Bool("version", false, "Print the version, commit and Go version, and exit.")
	o.addFlags(fs)
	err := fs.Parse(os.Args[1:])
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(os.Stdout, "Usage: fanout-injector (--pki=self | --tls-cert-file F --tls-private-key-file F) [--sidecar-image IMAGE] [flags]\n"+
			"       fanout-injector --version\n\n"+
			"A mutating admission webhook (POST /mutate, /mutate/namespace, /mutate/hosted) for Pods. A pod labelled fanout.dev/inject=\"true\" gets\n"+
			"fanout as a native sidecar, and its client container's kubeconfig flags or KUBECONFIG point at\n"+
			"fanout's localhost kubeconfig. Pods it cannot handle (no kubeconfig found, conflicting settings,\n"+
			"mirror pods, hostNetwork pods) are admitted unmutated with a warning. See docs/injector.md.\n\n"+
			"Exit codes: 0 after --help, --version or SIGTERM; 2 for bad flags or arguments; 1 when it cannot\n"+
			"start (the cause is the one error line on stderr) or stop cleanly.\n\nFlags:\n")
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		os.Exit(0)
	case err != nil:
		exit(2, "%v (fanout-injector --help lists the flags)", err)
	case fs.NArg() > 0:
		exit(2, "unexpected argument %q: fanout-injector takes flags only", fs.Arg(0))
	case *showVersion:
		fmt.Print(version.Get().Text("fanout-injector"))
		os.Exit(0)
	}
	if err := o.complete(); err != nil {
		exit(2, "invalid flags: %s", startup.Line(err))
	}
	log := logging.New(o.logFormat, o.verbosity, os.Stderr)
	slog.SetDefault(log)
	os.Exit(startup.Run(fx.New(app(o, log)), log, "fanout-injector", o.explain))
}

// explain names --listen-address in the webhook server's listen error:
// package webhook does not know the flag that set the address (the
// metrics server's error names its flag already). Everything else names
// its flag or file, and is the environment's fault: exit 1.
func (o *options) explain(err error) (int, error) {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "listen" && !strings.Contains(err.Error(), "--metrics-address") {
		return 1, fmt.Errorf("--listen-address %s: %w", o.listenAddress, err)
	}
	return 1, err
}

// exit prints a message for a command-line error and ends the process.
func exit(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fanout-injector: "+format+"\n", args...)
	os.Exit(code)
}

// app is the injector's fx application.
func app(o *options, log *slog.Logger) fx.Option {
	return fx.Options(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.StopTimeout(15*time.Second),
		fx.Supply(
			log,
			o,
			o.limits,
		),
		metrics.Module,
		fx.Provide(sidecarConfig, servingCertificate, serverConfig),
		webhook.Module,
		fx.Invoke(func(lc fx.Lifecycle, g prometheus.Gatherer) {
			if o.metricsAddress == "" {
				return
			}
			srv := newMetricsServer(g, log, metricsTimeouts)
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error { return srv.Start(o.metricsAddress) },
				OnStop:  srv.Stop,
			})
		}),
	)
}

// serverConfig is the webhook server's configuration; a --client-ca-file
// that holds no certificate fails the start.
func serverConfig(o *options, log *slog.Logger) (webhook.ServerConfig, error) {
	c := webhook.ServerConfig{ListenAddress: o.listenAddress, MaxConnections: o.maxConnections}
	if o.clientCAFile != "" {
		f, err := webhook.NewClientCAFile(o.clientCAFile, log)
		if err != nil {
			return c, err
		}
		c.ClientCAs = f
	}
	return c, nil
}

// timeouts bound how long one connection may hold the metrics server.
type timeouts struct {
	readHeader, read, write, idle time.Duration
}

// metricsTimeouts: a scrape is one small GET, answered from memory. The
// listener is plaintext on the pod network, so a client that opens
// connections and sends nothing, or reads nothing, must not keep them.
var metricsTimeouts = timeouts{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 90 * time.Second}

// newMetricsServer serves /metrics and /healthz on --metrics-address.
func newMetricsServer(g prometheus.Gatherer, log *slog.Logger, t timeouts) *serve.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{Timeout: t.write / 2}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return serve.New("metrics server", "--metrics-address", &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}, log)
}
