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

// topMain runs `fanout top` with args (those after "top") and returns the
// exit code.
func topMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var open func() (*admincli.Screen, error)
	if admincli.StdoutIsTerminal() {
		open = admincli.OpenScreen
	}
	return runTop(ctx, args, os.Stdout, os.Stderr, open)
}

// runTop is `fanout top`: a live table of what each client of a running
// sidecar costs, from its admin server's /debug/cost and /debug/endpoints.
// open is nil when stdout is not a terminal; it returns the screen for the
// live table. It returns the exit code.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer, open func() (*admincli.Screen, error)) int {
	fs := pflag.NewFlagSet("fanout top", pflag.ContinueOnError)
	fs.SetOutput(stdout) // --help; errors go to stderr
	addr := fs.String("admin-address", "127.0.0.1:7081", "host:port of the sidecar's admin server (its --admin-address); /debug/cost answers loopback clients only, so run this in the pod (kubectl exec), or use kubectl fanout top POD")
	o := admincli.AddTopFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fanout top [--admin-address ADDR] [--interval D] [--once] [-o table|json] [--sort KEY]\n\n"+
			admincli.TopHelp("Run it in the pod: kubectl exec -it POD -c fanout -- fanout top")+"\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, args, stderr); done {
		return code
	}
	t := admincli.Target{Client: &http.Client{Timeout: 5 * time.Second}, Addr: *addr}
	return admincli.Top(ctx, "fanout top", t, o, stdout, stderr, open)
}
