package admincli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/fanout-dev/fanout/cmd/internal/top"
)

// Screen is the terminal the live top table is drawn on.
type Screen struct {
	// Keys are the key presses, nil when stdin is not a terminal (kubectl
	// exec without -i): then only a signal ends the table.
	Keys io.Reader
	// Raw is true while the terminal is in raw mode, where a newline does
	// not return the carriage.
	Raw bool
	// Size is the terminal's width and height, 0 when unknown.
	Size func() (width, height int)
	// Resized receives when the terminal changes size.
	Resized <-chan os.Signal
	// Restore puts the terminal back as it was.
	Restore func()
}

// OpenScreen switches stdin to raw mode, so that a key press arrives at
// once and unechoed.
func OpenScreen() (*Screen, error) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	s := &Screen{
		Size: func() (int, int) {
			w, h, err := term.GetSize(int(os.Stdout.Fd()))
			if err != nil {
				return 0, 0
			}
			return w, h
		},
		Resized: winch,
		Restore: func() { signal.Stop(winch) },
	}
	if in := int(os.Stdin.Fd()); term.IsTerminal(in) {
		old, err := term.MakeRaw(in)
		if err != nil {
			return nil, fmt.Errorf("switching the terminal to raw mode: %w; use --once", err)
		}
		s.Keys, s.Raw = os.Stdin, true
		s.Restore = func() { signal.Stop(winch); _ = term.Restore(in, old) }
	}
	return s, nil
}

// TopOptions are `fanout top`'s own flags.
type TopOptions struct {
	Interval time.Duration
	Once     bool
	Output   string
	Sort     string
	fs       *pflag.FlagSet // tells whether --once was given
}

// TopHelp describes `fanout top` for its usage text; run, when not "",
// is a last sentence saying how to run it.
func TopHelp(run string) string {
	if run != "" {
		run = " " + run
	}
	return "Shows what each client of a running fanout costs, like top: one row per component\n" +
		"(program/controller from the User-Agent), verb, group/resource[/subresource] and scope,\n" +
		"with requests/s, errors/s and error %, retries/s, bytes/s received and sent, p99 latency\n" +
		"of short requests, open watches and watch events/s. p99 comes from the histogram buckets'\n" +
		"increase over the interval, interpolated linearly within a bucket as Prometheus'\n" +
		"histogram_quantile does, so it is no finer than the buckets (5ms, 10ms, 25ms, ... 30s).\n" +
		"The header shows each kube-apiserver's state and share of the requests.\n" +
		"Keys: r sort by requests/s, b by bytes/s, p by p99, e by errors/s; q or Ctrl-C quits.\n" +
		"The first screen averages since the sidecar's cost table started; later ones cover the\n" +
		"last interval." + run + "\n"
}

// AddTopFlags registers --interval, --once, -o and --sort on fs.
func AddTopFlags(fs *pflag.FlagSet) *TopOptions {
	o := &TopOptions{fs: fs}
	fs.DurationVar(&o.Interval, "interval", 2*time.Second, "refresh interval; with --once, the time between the two snapshots the rates come from")
	fs.BoolVar(&o.Once, "once", false, "print one table of the rates between two snapshots --interval apart, and exit (the default when stdout is not a terminal or with -o json; --once=false then prints one every --interval)")
	fs.StringVarP(&o.Output, "output", "o", "table", "table, or json: the rows with their rates and cumulative counters, and the apiservers, for scripts")
	fs.StringVar(&o.Sort, "sort", "requests", "initial sort, largest first: requests (requests/s), bytes (received and sent bytes/s), p99 or errors (errors/s)")
	return o
}

// Top shows the cost table of the sidecar at t and returns the exit code:
// 2 for bad options, 1 when the first read fails, the screen cannot be
// opened or stdout goes away. open is nil when stdout is not a terminal;
// it returns the screen for the live table. command prefixes its error
// lines.
func Top(ctx context.Context, command string, t Target, o *TopOptions, stdout, stderr io.Writer, open func() (*Screen, error)) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, command+": "+format+"\n", args...)
		return code
	}
	if o.Interval < 100*time.Millisecond {
		return fail(2, "--interval %s is too short; use at least 100ms", o.Interval)
	}
	if o.Output != "table" && o.Output != "json" {
		return fail(2, "--output %q: expected table or json", o.Output)
	}
	by, ok := top.ByRequests, false
	var names []string
	for _, k := range top.SortKeys {
		names = append(names, k.Name)
		if k.Name == o.Sort {
			by, ok = k.By, true
		}
	}
	if !ok {
		return fail(2, "--sort %q: expected one of %s", o.Sort, strings.Join(names, ", "))
	}
	once := o.Once
	if o.fs == nil || !o.fs.Changed("once") {
		once = open == nil || o.Output == "json"
	}

	fetch := func() (top.Snapshot, error) { return top.Fetch(ctx, t.Client, t.Addr) }
	first, err := fetch()
	if err != nil {
		return fail(1, "%v", err)
	}
	emit := func(prev *top.Snapshot, cur top.Snapshot) error {
		if o.Output == "json" {
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
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	if once || open == nil || o.Output == "json" {
		// A pipe or JSON: one result, or with --once=false one per
		// interval, each over the interval before it.
		for prev := first; ; {
			cur, err := waitAndFetch(ctx, tick.C, fetch, command, stderr)
			if err != nil {
				return 0 // interrupted
			}
			if !once {
				fmt.Fprintf(stdout, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
			}
			if err := emit(&prev, cur); err != nil {
				return 1 // the reader went away (a closed pipe)
			}
			if once {
				return 0
			}
			prev = cur
		}
	}
	scr, err := open()
	if err != nil {
		return fail(1, "%v", err)
	}
	defer scr.Restore()
	return live(ctx, scr, stdout, tick.C, fetch, first, by)
}

// live redraws the table on scr every tick and at each key press until q,
// Ctrl-C (which arrives as a key in raw mode) or ctx ends.
func live(ctx context.Context, scr *Screen, stdout io.Writer, tick <-chan time.Time, fetch func() (top.Snapshot, error), first top.Snapshot, by top.SortKey) int {
	keys := make(chan byte)
	if scr.Keys != nil {
		go func() {
			defer close(keys)
			buf := make([]byte, 64)
			for {
				n, err := scr.Keys.Read(buf)
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
		w, h := scr.Size()
		n := note
		if scr.Keys == nil && n == "" {
			n = "no keys: stdin is not a terminal (use kubectl exec -it); Ctrl-C quits"
		}
		frame := "\x1b[H\x1b[2J" + top.Render(prev, cur, top.Frame{Sort: by, Width: w, Height: h, Keys: scr.Keys != nil, Note: n})
		if scr.Raw {
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
		case <-scr.Resized:
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
