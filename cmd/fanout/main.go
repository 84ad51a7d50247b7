// Command fanout is a sidecar that spreads a Kubernetes client's requests
// over every kube-apiserver, one request at a time, with the client's own
// credentials.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/sidecar"
	"github.com/fanout-dev/fanout/internal/runtimetune"
	"github.com/fanout-dev/fanout/internal/startup"
	"github.com/fanout-dev/fanout/internal/version"
)

// main exits 0 after --help, --version or a clean stop, 2 for bad flags or
// arguments, and 1 when fanout cannot start or stop; each failure says why
// on one line of stderr.
func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "status":
			os.Exit(statusMain(os.Args[2:]))
		case "top":
			os.Exit(topMain(os.Args[2:]))
		case "hold":
			os.Exit(holdMain(os.Args[2:]))
		case "version":
			os.Exit(versionMain(os.Args[2:], os.Stdout, os.Stderr))
		}
	}
	fs, o, rt, showVersion := flags()
	err := fs.Parse(os.Args[1:])
	switch {
	case errors.Is(err, pflag.ErrHelp):
		usage(os.Stdout, fs)
		os.Exit(0)
	case err != nil:
		exit(2, "%v (fanout --help lists the flags)", err)
	case fs.NArg() > 0:
		exit(2, "unexpected argument %q: fanout takes flags only; the subcommands (status, top, hold, version) come first", fs.Arg(0))
	case *showVersion:
		fmt.Print(version.Get().Text("fanout"))
		os.Exit(0)
	}
	if err := errors.Join(o.Validate(), rt.Validate()); err != nil {
		exit(2, "invalid flags: %s", startup.Line(err))
	}
	if err := o.CheckNetworkNamespace(); err != nil {
		exit(2, "%s", startup.Line(err))
	}
	log := sidecar.NewLogger(o, os.Stderr)
	slog.SetDefault(log) // libraries that log through slog's default get the same format and level
	collectors, err := runtimetune.Apply(*rt, log)
	if err != nil {
		exit(2, "invalid flags: %s", startup.Line(err))
	}
	app := fx.New(sidecar.App(*o, log), fx.Invoke(func(reg prometheus.Registerer) { reg.MustRegister(collectors...) }))
	os.Exit(startup.Run(app, log, "fanout", o.Explain))
}

// flags returns fanout's flag set, bound to the settings it fills, as
// --help prints it (docs/flags.md is generated from it).
func flags() (fs *pflag.FlagSet, o *sidecar.Config, rt *runtimetune.Options, showVersion *bool) {
	o, rt = sidecar.NewConfig(), runtimetune.NewOptions()
	fs = pflag.NewFlagSet("fanout", pflag.ContinueOnError)
	// --help is printed by main, to stdout; errors on one line of stderr.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	showVersion = fs.Bool("version", false, "Print the version, commit and Go version, and exit (as fanout version does).")
	o.AddFlags(fs)
	rt.AddFlags(fs)
	return fs, o, rt, showVersion
}

// versionMain is `fanout version`: the version, commit and Go version on
// stdout.
func versionMain(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("fanout version", pflag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fanout version\n\nPrints fanout's version, the commit it was built from (modified: with uncommitted\nchanges) and the Go release and platform; fanout_build_info carries the same values.\n")
	}
	if code, done := parseSubcommand(fs, args, stderr); done {
		return code
	}
	fmt.Fprint(stdout, version.Get().Text("fanout"))
	return 0
}
