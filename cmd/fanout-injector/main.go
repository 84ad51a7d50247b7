// Command fanout-injector is a mutating admission webhook that adds the
// fanout sidecar to pods labelled fanout.dev/inject="true" and points their
// client at it. See docs/injector.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
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
)

func main() {
	o := newOptions()
	fs := pflag.NewFlagSet("fanout-injector", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: fanout-injector --tls-cert-file F --tls-private-key-file F --sidecar-image IMAGE [flags]\n\n"+
			"A mutating admission webhook (POST /mutate, /mutate/namespace, /mutate/hosted) for Pods. A pod labelled fanout.dev/inject=\"true\" gets\n"+
			"fanout as a native sidecar, and its client container's kubeconfig flags or KUBECONFIG point at\n"+
			"fanout's localhost kubeconfig. Pods it cannot handle (no kubeconfig found, conflicting settings,\n"+
			"mirror pods, hostNetwork pods) are admitted unmutated with a warning. See docs/injector.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	o.addFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "fanout-injector: %v\nRun 'fanout-injector --help' for the flags.\n", err)
		os.Exit(2)
	}
	if err := o.complete(); err != nil {
		fmt.Fprintf(os.Stderr, "fanout-injector: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	log := logging.New(o.logFormat, o.verbosity, os.Stderr)
	slog.SetDefault(log)
	app := fx.New(app(o, log))
	if err := app.Err(); err != nil {
		log.Error("fanout-injector cannot start", "error", err)
		os.Exit(1)
	}
	app.Run()
}

// app is the injector's fx application.
func app(o *options, log *slog.Logger) fx.Option {
	return fx.Options(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.StopTimeout(15*time.Second),
		fx.Supply(
			log,
			o.sidecar,
			o,
			o.limits,
		),
		metrics.Module,
		fx.Provide(servingCertificate, serverConfig),
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
