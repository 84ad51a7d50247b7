package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/fanout-dev/fanout/cmd/fanout/internal/top"
)

// topMain runs `fanout top` with args (those after "top") and returns the
// exit code.
func topMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var open func() (*screen, error)
	if stdoutIsTerminal() {
		open = openScreen
	}
	return runTop(ctx, args, os.Stdout, os.Stderr, open)
}

// screen is the terminal fanout top draws on.
type screen struct {
	// keys are the key presses, nil when stdin is not a terminal (kubectl
	// exec without -i): then only a signal ends fanout top.
	keys io.Reader
	// raw is true while the terminal is in raw mode, where a newline does
	// not return the carriage.
	raw bool
	// size is the terminal's width and height, 0 when unknown.
	size func() (width, height int)
	// resized receives when the terminal changes size.
	resized <-chan os.Signal
	// restore puts the terminal back as it was.
	restore func()
}

// openScreen switches stdin to raw mode, so that a key press arrives at
// once and unechoed.
func openScreen() (*screen, error) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	s := &screen{
		size: func() (int, int) {
			w, h, err := term.GetSize(int(os.Stdout.Fd()))
			if err != nil {
				return 0, 0
			}
			return w, h
		},
		resized: winch,
		restore: func() { signal.Stop(winch) },
	}
	if in := int(os.Stdin.Fd()); term.IsTerminal(in) {
		old, err := term.MakeRaw(in)
		if err != nil {
			return nil, fmt.Errorf("switching the terminal to raw mode: %w; use --once", err)
		}
		s.keys, s.raw = os.Stdin, true
		s.restore = func() { signal.Stop(winch); _ = term.Restore(in, old) }
	}
	return s, nil
}

// runTop is `fanout top`: a live table of what each client of a running
// sidecar costs, from its admin server's /debug/cost and /debug/endpoints.
// open is nil when stdout is not a terminal; it returns the screen for the
// live table. It returns the exit code.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer, open func() (*screen, error)) int {
	fs := pflag.NewFlagSet("fanout top", pflag.ContinueOnError)
	fs.SetOutput(stdout) // --help; errors go to stderr
	addr := fs.String("admin-address", "127.0.0.1:7081", "host:port of the sidecar's admin server (its --admin-address); /debug/cost answers loopback clients only, so run this in the pod (kubectl exec)")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval; with --once, the time between the two snapshots the rates come from")
	once := fs.Bool("once", false, "print one table of the rates between two snapshots --interval apart, and exit (the default when stdout is not a terminal or with -o json; --once=false then prints one every --interval)")
	output := fs.StringP("output", "o", "table", "table, or json: the rows with their rates and cumulative counters, and the apiservers, for scripts")
	sortBy := fs.String("sort", "requests", "initial sort, largest first: requests (requests/s), bytes (received and sent bytes/s), p99 or errors (errors/s)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fanout top [--admin-address ADDR] [--interval D] [--once] [-o table|json] [--sort KEY]\n\n"+
			"Shows what each client of a running fanout costs, like top: one row per component\n"+
			"(program/controller from the User-Agent), verb, group/resource[/subresource] and scope,\n"+
			"with requests/s, errors/s and error %%, retries/s, bytes/s received and sent, p99 latency\n"+
			"of short requests, open watches and watch events/s. p99 comes from the histogram buckets'\n"+
			"increase over the interval, interpolated linearly within a bucket as Prometheus'\n"+
			"histogram_quantile does, so it is no finer than the buckets (5ms, 10ms, 25ms, ... 30s).\n"+
			"The header shows each kube-apiserver's state and share of the requests.\n"+
			"Keys: r sort by requests/s, b by bytes/s, p by p99, e by errors/s; q or Ctrl-C quits.\n"+
			"The first screen averages since the sidecar's cost table started; later ones cover the\n"+
			"last interval. Run it in the pod: kubectl exec -it POD -c fanout -- fanout top\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "fanout top: "+format+"\n", args...)
		return code
	}
	if code, done := parseSubcommand(fs, args, stderr); done {
		return code
	}
	if *interval < 100*time.Millisecond {
		return fail(2, "--interval %s is too short; use at least 100ms", *interval)
	}
	if *output != "table" && *output != "json" {
		return fail(2, "--output %q: expected table or json", *output)
	}
	by, ok := top.ByRequests, false
	var names []string
	for _, k := range top.SortKeys {
		names = append(names, k.Name)
		if k.Name == *sortBy {
			by, ok = k.By, true
		}
	}
	if !ok {
		return fail(2, "--sort %q: expected one of %s", *sortBy, strings.Join(names, ", "))
	}
	if !fs.Changed("once") {
		*once = open == nil || *output == "json"
	}

	c := &http.Client{Timeout: 5 * time.Second}
	fetch := func() (top.Snapshot, error) { return top.Fetch(ctx, c, *addr) }
	first, err := fetch()
	if err != nil {
		return fail(1, "%v", err)
	}
	emit := func(prev *top.Snapshot, cur top.Snapshot) error {
		if *output == "json" {
			b, err := top.JSON(top.Compute(prev, cur), by)
			if err != nil {
				return err
			}
			_, err = stdout.Write(append(b, '\n'))
			return err
		}
		_, err := io.WriteString(stdout, top.Render(prev, cur, top.Frame{Sort: by}))
		return err
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	if *once || open == nil || *output == "json" {
		// A pipe or JSON: one result, or with --once=false one per
		// interval, each over the interval before it.
		for prev := first; ; {
			cur, err := waitAndFetch(ctx, tick.C, fetch, "fanout top", stderr)
			if err != nil {
				return 0 // interrupted
			}
			if !*once {
				fmt.Fprintf(stdout, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
			}
			if err := emit(&prev, cur); err != nil {
				return 1 // the reader went away (a closed pipe)
			}
			if *once {
				return 0
			}
			prev = cur
		}
	}
	scr, err := open()
	if err != nil {
		return fail(1, "%v", err)
	}
	defer scr.restore()
	return live(ctx, scr, stdout, tick.C, fetch, first, by)
}

// live redraws the table on scr every tick and at each key press until q,
// Ctrl-C (which arrives as a key in raw mode) or ctx ends.
func live(ctx context.Context, scr *screen, stdout io.Writer, tick <-chan time.Time, fetch func() (top.Snapshot, error), first top.Snapshot, by top.SortKey) int {
	keys := make(chan byte)
	if scr.keys != nil {
		go func() {
			defer close(keys)
			buf := make([]byte, 64)
			for {
				n, err := scr.keys.Read(buf)
				for _, k := range buf[:n] {
					select {
					case keys <- k:
					case <-ctx.Done():
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	var prev *top.Snapshot
	cur, note := first, ""
	draw := func() error {
		w, h := scr.size()
		n := note
		if scr.keys == nil && n == "" {
			n = "no keys: stdin is not a terminal (use kubectl exec -it); Ctrl-C quits"
		}
		frame := "\x1b[H\x1b[2J" + top.Render(prev, cur, top.Frame{Sort: by, Width: w, Height: h, Keys: scr.keys != nil, Note: n})
		if scr.raw {
			frame = strings.ReplaceAll(frame, "\n", "\r\n")
		}
		_, err := io.WriteString(stdout, frame)
		return err
	}
	for {
		if draw() != nil {
			return 1
		}
		select {
		case <-ctx.Done():
			return 0
		case <-scr.resized:
		case k, ok := <-keys:
			if !ok {
				keys = nil // stdin closed: keep refreshing
				continue
			}
			switch k {
			case 'q', 'Q', 3, 4: // 3 and 4: Ctrl-C and Ctrl-D in raw mode
				return 0
			}
			for _, s := range top.SortKeys {
				if k == s.Key {
					by = s.By
				}
			}
		case <-tick:
			// Keys wait for the fetch, which the client's timeout bounds.
			next, err := fetch()
			if ctx.Err() != nil {
				return 0
			}
			if err != nil {
				note = fmt.Sprintf("refresh failed at %s, showing the last table: %v", time.Now().UTC().Format(time.TimeOnly), err)
				continue
			}
			p := cur
			prev, cur, note = &p, next, ""
		}
	}
}
