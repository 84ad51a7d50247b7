package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/cmd/internal/admincli"
)

// statusMain runs `fanout status` with args (those after "status") until
// it is done or interrupted, and returns the exit code.
func statusMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runStatus(ctx, args, os.Stdout, os.Stderr, admincli.StdoutIsTerminal())
}

// runStatus is `fanout status`: a table of the endpoints of a running
// sidecar, read from its admin server's /debug/endpoints. It returns the
// exit code.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	fs := pflag.NewFlagSet("fanout status", pflag.ContinueOnError)
	fs.SetOutput(stdout) // --help; errors go to stderr
	addr := fs.String("admin-address", "127.0.0.1:7081", "host:port of the sidecar's admin server (its --admin-address); /debug/endpoints answers loopback clients only, so run this in the pod (kubectl exec), or use kubectl fanout status POD")
	o := admincli.AddStatusFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fanout status [--admin-address ADDR] [--watch] [--interval D]\n\n"+admincli.StatusHelp+"\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, args, stderr); done {
		return code
	}
	t := admincli.Target{Client: &http.Client{Timeout: 5 * time.Second}, Addr: *addr}
	return admincli.Status(ctx, "fanout status", t, *o, stdout, stderr, isTerminal)
}
