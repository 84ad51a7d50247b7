package resolver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// DefaultDNSInterval is how often the dns resolver looks the name up again.
const DefaultDNSInterval = 5 * time.Second

// MinResolveNowGap is the least time between the start of one lookup and
// that of a lookup asked for by ResolveNow, so that a flapping endpoint
// cannot turn into a DNS storm.
const MinResolveNowGap = time.Second

// DNS resolves a name to its A and AAAA records, one endpoint per address,
// and looks it up again every Interval. A failed or empty lookup keeps the
// last good set (see publisher). DNS knows nothing of draining: an
// apiserver leaves the set when its record goes. ResolveNow asks for a
// lookup before the next tick. A DNS must not be copied after first use.
type DNS struct {
	Host string
	Port string
	// Interval between lookups; DefaultDNSInterval if zero.
	Interval time.Duration
	// Lookup is net.DefaultResolver.LookupIPAddr if nil; tests replace it.
	Lookup func(ctx context.Context, host string) ([]net.IPAddr, error)
	// Fallback is published if the first lookups fail.
	Fallback []Endpoint
	Log      *slog.Logger // discards if nil
	Metrics  *Metrics

	kickOnce sync.Once
	kick     chan struct{} // buffered 1: requests made while one is pending coalesce
}

var _ Resolver = (*DNS)(nil)

// ResolveNow asks Run to look the name up again without waiting for the
// next tick, e.g. because an endpoint failed and its address may have
// changed. It never blocks and may be called from any goroutine, before or
// during Run. Requests coalesce, and a requested lookup starts at least
// MinResolveNowGap after the start of the previous lookup.
func (d *DNS) ResolveNow() {
	select {
	case d.kickChan() <- struct{}{}:
	default: // one is pending already
	}
}

func (d *DNS) kickChan() chan struct{} {
	d.kickOnce.Do(func() { d.kick = make(chan struct{}, 1) })
	return d.kick
}

// Run looks the name up at once, then every Interval and on ResolveNow,
// until ctx is done.
func (d *DNS) Run(ctx context.Context, update func([]Endpoint)) error {
	interval := d.Interval
	if interval <= 0 {
		interval = DefaultDNSInterval
	}
	lookup := d.Lookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupIPAddr
	}
	p := &publisher{name: "dns", update: update, fallback: d.Fallback, log: logger(d.Log), metrics: d.Metrics}
	kick := d.kickChan()
	// The ticker starts before the first lookup so that a slow lookup
	// does not push every later one back.
	t := time.NewTicker(interval)
	defer t.Stop()
	// delayed holds a ResolveNow that came too soon after the last lookup
	// until MinResolveNowGap has passed; nil when none waits.
	var delayed *time.Timer
	defer func() {
		if delayed != nil {
			delayed.Stop()
		}
	}()
	for {
		started := time.Now()
		// This lookup answers the requests made so far.
		select {
		case <-kick:
		default:
		}
		if delayed != nil {
			delayed.Stop()
			delayed = nil
		}
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
		if !waitNext(ctx, t.C, kick, started, &delayed) {
			return nil
		}
	}
}

// waitNext returns when the next lookup is due: at the next tick, on a
// ResolveNow, or when a ResolveNow delayed to MinResolveNowGap after
// lastStart is due. It returns false when ctx is done. *delayed is the
// pending delay timer, which waitNext may set or clear.
func waitNext(ctx context.Context, tick <-chan time.Time, kick <-chan struct{}, lastStart time.Time, delayed **time.Timer) bool {
	for {
		var due <-chan time.Time
		if *delayed != nil {
			due = (*delayed).C
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-due:
			*delayed = nil
			return true
		case <-kick:
			gap := MinResolveNowGap - time.Since(lastStart)
			if gap <= 0 {
				return true
			}
			if *delayed == nil {
				*delayed = time.NewTimer(gap)
			}
		}
	}
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
