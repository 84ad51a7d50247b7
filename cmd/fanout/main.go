// Command fanout is a sidecar that spreads a Kubernetes client's requests
// over every kube-apiserver, one request at a time, with the client's own
// credentials.
package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/sidecar"
	"github.com/fanout-dev/fanout/internal/runtimetune"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "status":
			os.Exit(statusMain(os.Args[2:]))
		case "top":
			os.Exit(topMain(os.Args[2:]))
		case "hold":
			os.Exit(holdMain(os.Args[2:]))
		}
	}
	o, rt := sidecar.NewConfig(), runtimetune.NewOptions()
	fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
	fs.Usage = func() { usage(fs) }
	o.AddFlags(fs)
	rt.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err == pflag.ErrHelp {
		os.Exit(0)
	} else if err != nil {
		exit(2, "%v\nRun 'fanout --help' for the flags.", err)
	}
	if err := errors.Join(o.Validate(), rt.Validate()); err != nil {
		exit(2, "invalid flags:\n%v", err)
	}
	if err := o.CheckNetworkNamespace(); err != nil {
		exit(2, "%v", err)
	}
	log := sidecar.NewLogger(o, os.Stderr)
	slog.SetDefault(log) // libraries that log through slog's default get the same format and level
	collectors, err := runtimetune.Apply(*rt, log)
	if err != nil {
		exit(2, "invalid flags:\n%v", err)
	}
	app := fx.New(sidecar.App(*o, log), fx.Invoke(func(reg prometheus.Registerer) { reg.MustRegister(collectors...) }))
	if err := app.Err(); err != nil {
		log.Error("fanout cannot start", "error", err)
		os.Exit(1)
	}
	app.Run()
}
