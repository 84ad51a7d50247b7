package resolver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"k8s.io/utils/clock"
)

// DefaultDNSInterval is how often the dns resolver looks the name up again.
const DefaultDNSInterval = 5 * time.Second

// DNS resolves a name to its A and AAAA records, one endpoint per address,
// and looks it up again every Interval. A failed or empty lookup keeps the
// last good set (see publisher). DNS knows nothing of draining: an
// apiserver leaves the set when its record goes.
type DNS struct {
	Host string
	Port string
	// Interval between lookups; DefaultDNSInterval if zero.
	Interval time.Duration
	// Lookup is net.DefaultResolver.LookupIPAddr if nil; tests replace it.
	Lookup func(ctx context.Context, host string) ([]net.IPAddr, error)
	// Fallback is published if the first lookups fail.
	Fallback []Endpoint
	Clock    clock.WithTicker // the real clock if nil
	Log      *slog.Logger     // slog.Default() if nil
	Metrics  *Metrics
}

var _ Resolver = (*DNS)(nil)

// Run looks the name up at once and then every Interval until ctx is done.
func (d *DNS) Run(ctx context.Context, update func([]Endpoint)) error {
	clk := d.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	interval := d.Interval
	if interval <= 0 {
		interval = DefaultDNSInterval
	}
	lookup := d.Lookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupIPAddr
	}
	p := &publisher{name: "dns", update: update, fallback: d.Fallback, log: logger(d.Log), metrics: d.Metrics, now: clk.Now}
	// The ticker starts before the first lookup so that a slow lookup
	// does not push every later one back.
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		// A lookup may take at most one interval, so that a hung resolver
		// does not stall refreshes forever.
		lctx, cancel := context.WithTimeout(ctx, interval)
		addrs, err := lookup(lctx, d.Host)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			err = fmt.Errorf("lookup %s: %w", d.Host, err)
		}
		eps := make([]Endpoint, 0, len(addrs))
		for _, a := range addrs {
			eps = append(eps, Endpoint{Address: net.JoinHostPort(a.String(), d.Port)})
		}
		p.result(eps, err)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
