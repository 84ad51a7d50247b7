package sidecar

import (
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy"
)

// TestSizedToMemory checks the auto formula of --max-connections and
// --replay-budget at the limits the injector and operators set, and its
// bounds.
func TestSizedToMemory(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name        string
		limit       int64
		connections int
		replay      int64
	}{
		{"no limit", math.MaxInt64, listener.DefaultMaxConnections, proxy.DefaultReplayBudget},
		// 90% of the injector's 256Mi, as --memory-limit auto sets it.
		{"256Mi container", 256 * mi * 9 / 10, 1843, 256 * mi * 9 / 10 / 8},
		{"64Mi container", 64 * mi * 9 / 10, 460, 7549747},
		{"16Mi: both floors", 16 * mi, minAutoConnections, proxy.MinAutoReplayBudget},
		{"4Gi: both ceilings", 4 << 30, listener.DefaultMaxConnections, proxy.DefaultReplayBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, r := sizedToMemory(tc.limit)
			if c != tc.connections || r != tc.replay {
				t.Errorf("sizedToMemory(%d) = %d connections, %d bytes; want %d, %d", tc.limit, c, r, tc.connections, tc.replay)
			}
			if tc.limit != math.MaxInt64 && int64(c)*connectionCost+r > tc.limit/2 && c > minAutoConnections {
				t.Errorf("connections and replay budget take %d bytes, over half of the %d-byte limit", int64(c)*connectionCost+r, tc.limit)
			}
		})
	}
}

// TestMemoryFlags: the flags default to auto, which App fills in; a value
// on the command line wins; 0 and nonsense are refused.
func TestMemoryFlags(t *testing.T) {
	parse := func(args ...string) (*Config, error) {
		c := NewConfig()
		fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.AddFlags(fs)
		return c, fs.Parse(args)
	}
	log := slog.New(slog.DiscardHandler)
	c, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	c.sizeToMemory(256<<20*9/10, log)
	// The replay budget stays 0: the proxy sizes it, for the library too.
	if c.Listener.MaxConnections != 1843 || c.Engine.Proxy.ReplayBudget != 0 {
		t.Errorf("auto under 256Mi: %d connections, replay budget %d; want 1843 and 0 (auto)", c.Listener.MaxConnections, c.Engine.Proxy.ReplayBudget)
	}
	c, err = parse("--max-connections", "100", "--replay-budget", "2Mi")
	if err != nil {
		t.Fatal(err)
	}
	c.sizeToMemory(256<<20*9/10, log)
	if c.Listener.MaxConnections != 100 || c.Engine.Proxy.ReplayBudget != 2<<20 {
		t.Errorf("explicit flags: %d connections, %d bytes; want 100 and 2Mi", c.Listener.MaxConnections, c.Engine.Proxy.ReplayBudget)
	}
	c, err = parse("--replay-budget", "off")
	if err != nil || c.Engine.Proxy.ReplayBudget != -1 {
		t.Errorf("--replay-budget off: %d, %v; want -1 (no body kept)", c.Engine.Proxy.ReplayBudget, err)
	}
	for _, args := range [][]string{{"--max-connections", "0"}, {"--max-connections", "many"}, {"--replay-budget", "lots"}} {
		if _, err := parse(args...); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: error %v, want one naming %s", args, err, args[0])
		}
	}
}
