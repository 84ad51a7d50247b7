package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/loops"
	"github.com/fanout-dev/fanout/resolver"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultInterval = 2 * time.Second
	DefaultTimeout  = time.Second
)

// Upstream returns the connection pool for an endpoint. The sidecar and the
// library give the prober pools of its own (a second *transport.Transports
// with the proxy's TLS config and client credentials), not the proxy's: a
// probe then checks the endpoint with the same certificate requests use,
// but over a connection of its own, so a proxy connection that is stuck
// (its streams used up by watches, say) neither delays the probe nor is
// taken for the endpoint's health. For is called concurrently from every
// probe goroutine.
type Upstream interface {
	For(address string, mode transport.AuthMode) http.RoundTripper
}

// Sink receives probe results. *balancer.Balancer implements it. SetReady
// is called concurrently from every probe goroutine, after each probe (not
// only on a change, so that a report lost to a concurrent endpoint update
// is repeated); it must not block and must ignore unknown addresses.
type Sink interface {
	SetReady(address string, ready bool)
}

// Config configures a Prober.
type Config struct {
	// Interval between probes of one endpoint. Zero means DefaultInterval.
	Interval time.Duration
	// Timeout of one probe. Zero means DefaultTimeout; it is capped at
	// Interval, so that probes of an endpoint never overlap.
	Timeout time.Duration
	// Rise is how many passing probes in a row bring a not-ready endpoint
	// back, and Fall how many failing ones in a row take a ready one out
	// (HAProxy's rise and fall). Zero means DefaultRise and DefaultFall.
	// An endpoint starts ready, so that startup waits for nothing.
	Rise int
	Fall int
}

// Defaults of Config.Rise and Config.Fall. One passing probe of a
// restarted apiserver could be a fluke of its startup; one failing probe
// of a busy one a timeout. A shutting-down apiserver is drained at once by
// its own "shutting down" answers whatever Fall says.
const (
	DefaultRise = 2
	DefaultFall = 2
)

// Validate reports an invalid field in terms of the flag that sets it.
func (c Config) Validate() error {
	if c.Interval < 0 {
		return fmt.Errorf("--probe-interval must not be negative, got %s", c.Interval)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("probe timeout must not be negative, got %s", c.Timeout)
	}
	if c.Rise < 0 || c.Fall < 0 {
		return fmt.Errorf("--probe-rise and --probe-fall must not be negative, got %d and %d", c.Rise, c.Fall)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	c.Timeout = min(c.Timeout, c.Interval)
	if c.Rise == 0 {
		c.Rise = DefaultRise
	}
	if c.Fall == 0 {
		c.Fall = DefaultFall
	}
	return c
}

// Prober runs one probe goroutine per endpoint of the latest snapshot.
//
// Update is called from one goroutine (the resolver's); Start and Stop from
// the app's lifecycle. All three serialise on mu, which the probe
// goroutines never take, so Update and Stop may wait for them under it.
type Prober struct {
	cfg     Config
	up      Upstream
	sink    Sink
	log     *slog.Logger
	total   *prometheus.CounterVec
	readyGV *prometheus.GaugeVec

	mu      sync.Mutex
	running bool
	want    []string  // addresses of the latest snapshot
	probes  loops.Set // running goroutines, by address
}

// New returns a stopped Prober for cfg, which passed Validate (the
// engine's Config.Validate calls it). Nothing is probed until Start.
func New(cfg Config, up Upstream, sink Sink, log *slog.Logger) (*Prober, error) {
	if up == nil || sink == nil {
		return nil, errors.New("health: New needs an Upstream and a Sink")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Prober{
		cfg:  cfg.withDefaults(),
		up:   up,
		sink: sink,
		log:  log,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_endpoint_probe_total",
			Help: "Readiness probes (GET /readyz) of the kube-apiserver endpoint, by result: ready (200) or not_ready (anything else, including dial errors and timeouts).",
		}, []string{"endpoint", "result"}),
		readyGV: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_endpoint_probe_ready",
			Help: "1 if the endpoint's last readiness probe passed (or it has not been probed yet), 0 if it failed.",
		}, []string{"endpoint"}),
	}, nil
}

// Collectors returns the prober's metrics. Register them once.
func (p *Prober) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.total, p.readyGV}
}

// Update replaces the endpoint set with a full snapshot: endpoints that
// went away stop being probed (Update returns once their goroutines have
// ended, so a caller may then drop their connection pools), new ones are
// probed at once. It does not retain eps.
func (p *Prober) Update(eps []resolver.Endpoint) {
	addrs := make([]string, len(eps))
	for i, e := range eps {
		addrs[i] = e.Address
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = addrs
	if p.running {
		p.syncLocked()
	}
}

// Start begins probing the latest snapshot's endpoints. It does not block.
func (p *Prober) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running = true
	p.syncLocked()
	return nil
}

// Stop ends every probe and waits for the goroutines. A later Update
// starts nothing.
func (p *Prober) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running = false
	p.syncLocked()
	return nil
}

// syncLocked makes the running goroutines match want (none unless
// running). p.mu must be held.
func (p *Prober) syncLocked() {
	stopped := p.probes.Sync(loops.Keep(p.running, p.want), p.run, func(a string) {
		// A new endpoint counts as ready until a probe says otherwise, so
		// that startup waits for nothing.
		p.readyGV.WithLabelValues(a).Set(1)
	})
	for _, a := range stopped {
		// The balancer drops removed endpoints from its scrape; do the same.
		p.total.DeletePartialMatch(prometheus.Labels{"endpoint": a})
		p.readyGV.DeleteLabelValues(a)
	}
}

// run probes addr at once and then every Interval until ctx ends.
func (p *Prober) run(ctx context.Context, addr string, _ <-chan struct{}) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	ready := true
	streak := 0 // probes in a row that disagree with ready
	for {
		err := p.probe(ctx, addr)
		if ctx.Err() != nil {
			// Cancelled mid-probe: the endpoint went away or we are
			// stopping, and the failure says nothing about it.
			return
		}
		passed := err == nil
		result := "ready"
		if !passed {
			result = "not_ready"
		}
		p.total.WithLabelValues(addr, result).Inc()
		now := ready
		if passed == ready {
			streak = 0
		} else if streak++; (passed && streak >= p.cfg.Rise) || (!passed && streak >= p.cfg.Fall) {
			now, streak = passed, 0
		}
		switch {
		case ready && !now:
			p.log.Info("endpoint not ready: no requests go to it until its /readyz passes", "endpoint", addr, "reason", err.Error())
			p.readyGV.WithLabelValues(addr).Set(0)
		case !ready && now:
			p.log.Info("endpoint ready again", "endpoint", addr)
			p.readyGV.WithLabelValues(addr).Set(1)
		}
		ready = now
		p.sink.SetReady(addr, ready)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe returns nil if GET /readyz answers 200, else why not.
func (p *Prober) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	// The pool connects to addr whatever the URL's host; the host only
	// sets :authority. The TLS server name comes from the pool's config.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := p.up.For(addr, transport.AuthSidecar).RoundTrip(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("GET /readyz: no answer within %s", p.cfg.Timeout)
		}
		return fmt.Errorf("GET /readyz: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		// The probe pool's connections may carry a certificate the
		// apiserver no longer accepts: renew them for the next probe.
		// This probe is not sent again; failing once is fine.
		transport.RenewAfterUnauthorized(resp)
	}
	// Read the body in full (it is small) so the stream ends cleanly, and
	// keep the failed checks ("[-]etcd failed: ...") for the log.
	const maxBody = 16 << 10
	var failed []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxBody))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "[-]") {
			failed = append(failed, line)
		}
	}
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	if len(failed) > 0 {
		return fmt.Errorf("GET /readyz: %s: %s", resp.Status, strings.Join(failed, "; "))
	}
	return fmt.Errorf("GET /readyz: %s", resp.Status)
}
