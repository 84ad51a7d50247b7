// Package admincli runs `fanout status` and `fanout top` against a
// sidecar's admin server once their command line is parsed: the refresh
// loops and the screen, fed through whatever reaches the admin server.
// fanout runs them in the pod over loopback; kubectl-fanout over the API
// server's port-forward. It links no Kubernetes library, as the sidecar
// binary must not (cmd/fanout/nok8s_test.go).
package admincli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/admin"
)

// Target is the admin server a command reads: Addr (host:port) through
// Client.
type Target struct {
	Client *http.Client
	Addr   string
}

// StatusOptions are `fanout status`'s own flags.
type StatusOptions struct {
	Watch    bool
	Interval time.Duration
}

// StatusHelp describes `fanout status` for its usage text.
const StatusHelp = "Prints one line per kube-apiserver endpoint of a running fanout: state, share of requests,\n" +
	"in-flight short and long-running requests, latency score (1 = as fast as usual) and errors.\n" +
	"Without --watch, share and counts are since fanout started.\n"

// AddStatusFlags registers --watch and --interval on fs.
func AddStatusFlags(fs *pflag.FlagSet) *StatusOptions {
	o := &StatusOptions{}
	fs.BoolVar(&o.Watch, "watch", false, "refresh every --interval; share, rate and errors then cover the last interval")
	fs.DurationVar(&o.Interval, "interval", 2*time.Second, "refresh interval with --watch")
	return o
}

// Status prints the endpoint table of the sidecar at t, once or with
// o.Watch until ctx ends, and returns the exit code: 2 for bad options,
// 1 when the first read fails or stdout goes away. command prefixes its
// error lines.
func Status(ctx context.Context, command string, t Target, o StatusOptions, stdout, stderr io.Writer, isTerminal bool) int {
	if o.Watch && o.Interval < 100*time.Millisecond {
		fmt.Fprintf(stderr, "%s: --interval %s is too short; use at least 100ms\n", command, o.Interval)
		return 2
	}
	fetch := func() (admin.Snapshot, error) { return admin.FetchSnapshot(ctx, t.Client, t.Addr) }

	cur, err := fetch()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
		return 1
	}
	if !o.Watch {
		if err := admin.StatusTable(stdout, cur, nil, 0); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", command, err)
			return 1
		}
		return 0
	}
	// Until the first interval has passed there is nothing to diff, so
	// the first table counts since start.
	var prev *admin.Snapshot
	var elapsed time.Duration
	last := time.Now()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		var buf bytes.Buffer
		if isTerminal {
			// Home and clear, then the table: it refreshes in place.
			buf.WriteString("\x1b[H\x1b[2J")
		} else {
			fmt.Fprintf(&buf, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
		}
		if err := admin.StatusTable(&buf, cur, prev, elapsed); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", command, err)
			return 1
		}
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return 1 // the reader went away (a closed pipe)
		}
		next, err := waitAndFetch(ctx, tick.C, fetch, command, stderr)
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

// StdoutIsTerminal reports whether stdout is a character device, so that
// --watch redraws in place instead of appending tables.
func StdoutIsTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
