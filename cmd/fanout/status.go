package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/admin"
)

// statusMain runs `fanout status` with args (those after "status") until
// it is done or interrupted, and returns the exit code.
func statusMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runStatus(ctx, args, os.Stdout, os.Stderr, stdoutIsTerminal())
}

// runStatus is `fanout status`: a table of the endpoints of a running
// sidecar, read from its admin server's /debug/endpoints. It returns the
// exit code.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	fs := pflag.NewFlagSet("fanout status", pflag.ContinueOnError)
	fs.SetOutput(stdout) // --help; errors go to stderr
	addr := fs.String("admin-address", "127.0.0.1:7081", "host:port of the sidecar's admin server (its --admin-address); /debug/endpoints answers loopback clients only, so run this in the pod (kubectl exec)")
	watch := fs.Bool("watch", false, "refresh every --interval; share, rate and errors then cover the last interval")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval with --watch")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fanout status [--admin-address ADDR] [--watch] [--interval D]\n\n"+
			"Prints one line per kube-apiserver endpoint of a running fanout: state, share of requests,\n"+
			"in-flight short and long-running requests, latency score (1 = as fast as usual) and errors.\n"+
			"Without --watch, share and counts are since fanout started.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, args, stderr); done {
		return code
	}
	if *watch && *interval < 100*time.Millisecond {
		fmt.Fprintf(stderr, "fanout status: --interval %s is too short; use at least 100ms\n", *interval)
		return 2
	}
	c := &http.Client{Timeout: 5 * time.Second}
	fetch := func() (admin.Snapshot, error) { return admin.FetchSnapshot(ctx, c, *addr) }

	cur, err := fetch()
	if err != nil {
		fmt.Fprintf(stderr, "fanout status: %v\n", err)
		return 1
	}
	if !*watch {
		if err := admin.StatusTable(stdout, cur, nil, 0); err != nil {
			fmt.Fprintf(stderr, "fanout status: %v\n", err)
			return 1
		}
		return 0
	}
	// Until the first interval has passed there is nothing to diff, so
	// the first table counts since start.
	var prev *admin.Snapshot
	var elapsed time.Duration
	last := time.Now()
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		var buf bytes.Buffer
		if isTerminal {
			// Home and clear, then the table: it refreshes in place.
			buf.WriteString("\x1b[H\x1b[2J")
		} else {
			fmt.Fprintf(&buf, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
		}
		if err := admin.StatusTable(&buf, cur, prev, elapsed); err != nil {
			fmt.Fprintf(stderr, "fanout status: %v\n", err)
			return 1
		}
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return 1 // the reader went away (a closed pipe)
		}
		next, err := waitAndFetch(ctx, t.C, fetch, "fanout status", stderr)
		if err != nil {
			return 0 // interrupted
		}
		now := time.Now()
		p := cur
		prev, cur, elapsed, last = &p, next, now.Sub(last), now
	}
}

// waitAndFetch waits for the next tick and fetches a snapshot, reporting
// failed fetches on stderr after the command's name and skipping them (a
// sidecar restarting is worth seeing, not worth quitting). It returns an
// error only when ctx ends.
func waitAndFetch[S any](ctx context.Context, tick <-chan time.Time, fetch func() (S, error), command string, stderr io.Writer) (S, error) {
	var none S
	for {
		select {
		case <-ctx.Done():
			return none, ctx.Err()
		case <-tick:
		}
		s, err := fetch()
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return none, ctx.Err()
		}
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
	}
}

// stdoutIsTerminal reports whether stdout is a character device, so that
// --watch redraws in place instead of appending tables.
func stdoutIsTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
