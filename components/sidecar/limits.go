package sidecar

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/proxy"
)

// LimitOptions are the flags that bound what local clients can make fanout
// hold: connections, requests in flight, header sizes and slow clients.
// Each maps to a proxy.Config field; see docs/security.md for what each
// one protects and what is deliberately not limited (watches last hours).
type LimitOptions struct {
	MaxConnections       int
	MaxInflight          int
	MaxLongRunning       int
	MaxConcurrentStreams int
	MaxHeaderBytes       int
	ReadHeaderTimeout    time.Duration
	RequestBodyTimeout   time.Duration
	IdleTimeout          time.Duration
}

// NewLimitOptions returns the defaults, which are proxy.Config's.
func NewLimitOptions() LimitOptions {
	return LimitOptions{
		MaxConnections:       proxy.DefaultMaxConnections,
		MaxInflight:          proxy.DefaultMaxInflight,
		MaxLongRunning:       proxy.DefaultMaxLongRunning,
		MaxConcurrentStreams: proxy.DefaultMaxConcurrentStreams,
		MaxHeaderBytes:       proxy.DefaultMaxHeaderBytes,
		ReadHeaderTimeout:    proxy.DefaultReadHeaderTimeout,
		RequestBodyTimeout:   proxy.DefaultRequestBodyTimeout,
		IdleTimeout:          proxy.DefaultIdleTimeout,
	}
}

// AddFlags registers the limit flags on fs.
func (l *LimitOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&l.MaxConnections, "max-connections", l.MaxConnections,
		"Most client connections open at once on the listener, exec and port-forward connections included; more are closed at accept (fanout_rejected_total{reason=\"connections\"}). Over HTTP/1.1 client-go opens one connection per watch.")
	fs.IntVar(&l.MaxInflight, "max-inflight", l.MaxInflight,
		"Most short requests (everything but watch, logs, exec, attach, port-forward, proxy) served at once; more are answered 429 with Retry-After: 1, which client-go retries (fanout_rejected_total{reason=\"short_inflight\"}).")
	fs.IntVar(&l.MaxLongRunning, "max-long-running", l.MaxLongRunning,
		"Most long-running requests (watch, logs, exec, attach, port-forward, proxy) open at once, a budget apart from --max-inflight so that many watches never starve short requests; more are answered 429 (fanout_rejected_total{reason=\"long_inflight\"}).")
	fs.IntVar(&l.MaxConcurrentStreams, "max-concurrent-streams", l.MaxConcurrentStreams,
		"Most HTTP/2 streams per client connection (h2c, or HTTP/2 with --listen-tls).")
	fs.IntVar(&l.MaxHeaderBytes, "max-header-bytes", l.MaxHeaderBytes,
		"Largest request header block; larger ones get 431.")
	fs.DurationVar(&l.ReadHeaderTimeout, "read-header-timeout", l.ReadHeaderTimeout,
		"How long a client may take to send its request headers before the connection is closed (slowloris).")
	fs.DurationVar(&l.RequestBodyTimeout, "request-body-timeout", l.RequestBodyTimeout,
		"How long a request may take to send its body, watches, logs and proxy requests included; a late one is reset (fanout_rejected_total{reason=\"body_timeout\"}). Upgrades (exec, attach, port-forward) are exempt: they stream their input for as long as they run.")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", l.IdleTimeout,
		"How long a keep-alive connection without requests stays open.")
}

// Validate says which limit cannot work. Zero is refused rather than read
// as "the default": a limit of 0 reads like "no limit".
func (l LimitOptions) Validate() error {
	var errs []error
	for _, c := range []struct {
		name string
		v    int
	}{
		{"--max-connections", l.MaxConnections},
		{"--max-inflight", l.MaxInflight},
		{"--max-long-running", l.MaxLongRunning},
		{"--max-concurrent-streams", l.MaxConcurrentStreams},
		{"--max-header-bytes", l.MaxHeaderBytes},
	} {
		if c.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", c.name, c.v))
		}
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{
		{"--read-header-timeout", l.ReadHeaderTimeout},
		{"--request-body-timeout", l.RequestBodyTimeout},
		{"--idle-timeout", l.IdleTimeout},
	} {
		if c.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", c.name, c.v))
		}
	}
	return errors.Join(errs...)
}

// apply copies the limits into a proxy.Config.
func (l LimitOptions) apply(c proxy.Config) proxy.Config {
	c.MaxConnections = l.MaxConnections
	c.MaxInflight = l.MaxInflight
	c.MaxLongRunning = l.MaxLongRunning
	c.MaxConcurrentStreams = l.MaxConcurrentStreams
	c.MaxHeaderBytes = l.MaxHeaderBytes
	c.ReadHeaderTimeout = l.ReadHeaderTimeout
	c.RequestBodyTimeout = l.RequestBodyTimeout
	c.IdleTimeout = l.IdleTimeout
	return c
}
