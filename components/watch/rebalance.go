package watch

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Active watch rebalancing: see docs/resilience.md, "Watch rebalancing".
//
// Placement alone (fewest open watches) restores the spread as watches
// expire, in 5 to 10 minutes with client-go. To go faster the rebalancer
// ends watches on an endpoint that holds more than its share, one event
// boundary at a time, at a bounded rate, and only watches whose client
// will re-watch without re-listing: past their initial events, a few
// seconds old, and having passed on an event newer than the moment every
// other endpoint became ready (so the next apiserver's watch cache holds
// the resourceVersion the client resumes from, and does not answer 410).

// LoadSource reports the endpoints' open long-running requests. It is
// satisfied by *balancer.Balancer; WatchLoads is called from the
// rebalancer's goroutine, concurrently with everything else, and must not
// block.
type LoadSource interface {
	WatchLoads() []balancer.WatchLoad
}

var _ LoadSource = (*balancer.Balancer)(nil)

// RebalanceConfig configures the Rebalancer. Zero fields mean the
// defaults.
type RebalanceConfig struct {
	// Rate is how many watches may be ended per second, on average
	// (--watch-rebalance-rate). Default 2.
	Rate float64
	// Tolerance is how far apart, as a fraction of the fair share, the
	// most and least loaded usable endpoints may be before watches are
	// moved (--watch-rebalance-tolerance); they are moved while the gap
	// exceeds max(1, Tolerance × share). Default 0.1.
	Tolerance float64
	// MinAge is how old a watch must be to be ended. Default 10s: client-go
	// re-lists after a watch that closed within a second without events.
	MinAge time.Duration
	// Margin is how long after an endpoint became usable the rebalancer
	// takes it as caught up (its watch caches initialised) and records the
	// resourceVersion it must see exceeded. Default 5s.
	Margin time.Duration
	// Interval is how often the loads are compared. Default 1s.
	Interval time.Duration
	// Freshness lets the rebalancer ask an apiserver holding watches not
	// caught up with another's readiness for a consistent read of their
	// resource, so that their next bookmark proves them caught up
	// (--watch-freshness-requests, freshness.go). Unlike the other
	// fields, false is off; engine.Defaults turns it on.
	Freshness bool
	// Serves reports whether the endpoint at address serves api
	// (*balancer.Balancer.Serves): a watch is moved only towards an
	// endpoint that serves it. nil: every endpoint serves everything.
	Serves func(address string, api balancer.API) bool
}

// Defaults of RebalanceConfig.
const (
	DefaultRebalanceRate      = 2.0
	DefaultRebalanceTolerance = 0.1
	DefaultRebalanceMinAge    = 10 * time.Second
	DefaultRebalanceMargin    = 5 * time.Second
	DefaultRebalanceInterval  = time.Second
)

// Validate reports the first unusable field, in terms of its flag.
func (c RebalanceConfig) Validate() error {
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("--watch-rebalance-rate must be a positive number of watches per second, got %v", c.Rate)
	}
	if c.Tolerance < 0 || math.IsNaN(c.Tolerance) || c.Tolerance > 10 {
		return fmt.Errorf("--watch-rebalance-tolerance must be within [0, 10], got %v", c.Tolerance)
	}
	if c.MinAge < 0 || c.Margin < 0 || c.Interval < 0 {
		return fmt.Errorf("watch rebalancing durations must not be negative, got min age %v, margin %v, interval %v", c.MinAge, c.Margin, c.Interval)
	}
	return nil
}

func (c RebalanceConfig) withDefaults() RebalanceConfig {
	if c.Rate == 0 {
		c.Rate = DefaultRebalanceRate
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultRebalanceTolerance
	}
	if c.MinAge == 0 {
		c.MinAge = DefaultRebalanceMinAge
	}
	if c.Margin == 0 {
		c.Margin = DefaultRebalanceMargin
	}
	if c.Interval == 0 {
		c.Interval = DefaultRebalanceInterval
	}
	return c
}

// Reasons a watch on an over-loaded endpoint is not ended, for
// fanout_watch_rebalance_blocked.
const (
	blockedInitialEvents = "initial_events"
	blockedTooYoung      = "too_young"
	blockedNotCaughtUp   = "not_caught_up"
	blockedRate          = "rate"
)

var blockedReasons = []string{blockedInitialEvents, blockedTooYoung, blockedNotCaughtUp, blockedRate}

// Rebalancer ends watches on over-loaded endpoints so that clients
// re-watch on the lightest one. Track is called from request goroutines;
// Start and Stop from the app's lifecycle; the comparison runs on one
// goroutine of its own.
type Rebalancer struct {
	cfg   RebalanceConfig
	src   LoadSource
	set   watchSet
	maxRV atomic.Uint64

	// The rebalancer goroutine's own state.
	ready  map[string]*readiness
	tokens float64
	filled time.Time

	// asked is, per source endpoint and resource, the targets' readiness
	// a freshness request was sent for (freshness.go).
	asked map[freshKey]time.Time

	rebalanced *prometheus.CounterVec
	blocked    *prometheus.GaugeVec
	spread     prometheus.Gauge
	freshness  *prometheus.CounterVec

	// ctx ends with Stop: the comparison loop and freshness requests.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// readiness is what the rebalancer recorded of an endpoint becoming
// usable: when, and the highest resourceVersion fanout had passed on
// Margin later (0 until then, or if it had seen none).
type readiness struct {
	since    time.Time
	recorded bool
	rv       uint64
	// floor is the lowest resourceVersion of the freshness requests'
	// answers sent after the record (freshness.go), 0 until one came: an
	// etcd revision after the readiness, at least the one the target's
	// caches started from. Set from the requests' goroutines.
	floor atomic.Uint64
}

// NewRebalancer returns a rebalancer over src's endpoints for cfg, which
// passed Validate (the engine's Config.Validate calls it), with its
// metrics registered with reg (nil: unregistered).
func NewRebalancer(cfg RebalanceConfig, src LoadSource, reg prometheus.Registerer) (*Rebalancer, error) {
	cfg = cfg.withDefaults()
	r := &Rebalancer{
		cfg:   cfg,
		src:   src,
		ready: map[string]*readiness{},
		asked: map[freshKey]time.Time{},
		rebalanced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_watch_rebalanced_total",
			Help: "Watches ended between two events by the rebalancer to move them off an endpoint holding more than its share, by framing (json, protobuf); the client re-watches from its last resourceVersion.",
		}, []string{"framing"}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_watch_rebalance_blocked",
			Help: "At the last comparison, watches on the most loaded endpoint that were not ended, by reason: initial_events (WatchList still streaming), too_young, not_caught_up (no event newer than another endpoint's readiness yet), rate (rate limit).",
		}, []string{"reason"}),
		spread: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_watch_spread",
			Help: "Open long-running requests on the most loaded usable endpoint minus those on the least loaded one, at the last comparison; under a zone policy (--zone-policy), each counted against its target share.",
		}),
		freshness: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_watch_freshness_requests_total",
			Help: "LISTs (limit=1, resourceVersion unset, the watch's credentials) sent, once per resource after another apiserver became ready, to an apiserver holding watches not caught up with that readiness, so that its watch cache, and the bookmarks it sends, catch up with etcd; by result: ok, rejected (another status than 200), failed (no answer).",
		}, []string{"result"}),
	}
	r.ctx, r.stop = context.WithCancel(context.Background())
	for _, res := range freshResults {
		r.freshness.WithLabelValues(res)
	}
	for _, reason := range blockedReasons {
		r.blocked.WithLabelValues(reason)
	}
	// Only the framings a watch can be cut in are counted; both start at
	// 0 so that the series exists before the first rebalance.
	for _, f := range []framing{framingJSON, framingProtobuf} {
		r.rebalanced.WithLabelValues(f.String())
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{r.rebalanced, r.blocked, r.spread, r.freshness} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// Start runs the comparison loop until Stop.
func (r *Rebalancer) Start() {
	ctx := r.ctx
	r.wg.Go(func() {
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.tick()
			}
		}
	})
}

// Stop ends the loop and the freshness requests in flight, and waits
// for them.
func (r *Rebalancer) Stop() {
	r.stop()
	r.wg.Wait()
}

// track wraps the body of a response to out, served by endpoint, so that
// it can be rebalanced, if it is a watch in a framing fanout can cut:
// never an upgrade (those do not come here), a log, exec or proxy stream.
func (r *Rebalancer) track(out *http.Request, resp *http.Response, info *reqinfo.Info, endpoint string, send Send, events *atomic.Int64) io.ReadCloser {
	if resp.StatusCode != http.StatusOK {
		return resp.Body
	}
	f := framingOf(resp.Header.Get("Content-Type"))
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		// Compressed bytes have no event boundaries fanout can see.
		f = framingNone
	}
	if f == framingNone {
		return resp.Body
	}
	if info.Verb != "watch" {
		return resp.Body
	}
	q := out.URL.Query()
	initial := q.Get("sendInitialEvents") == "true"
	w := &watchStream{
		rc: resp.Body, sc: newScanner(f, initial), framing: f, endpoint: endpoint,
		opened: time.Now(), set: &r.set, maxRV: &r.maxRV, events: events,
		onEnd: func(f framing) { r.rebalanced.WithLabelValues(f.String()).Inc() },
		url:   out.URL, header: out.Header, send: send,
	}
	if info.APIResource != "" {
		// The cacher, hence the freshness request, is per resource.
		w.resource = strings.Clone(info.Group + "/" + info.APIResource)
		w.api = balancer.API{Group: strings.Clone(info.Group), Version: strings.Clone(info.Version),
			Resource: strings.Clone(info.APIResource), Subresource: strings.Clone(info.Subresource)}
	}
	w.initialDone.Store(!initial)
	r.set.add(w)
	return w
}

// tick compares the loads once and ends what the rate allows.
func (r *Rebalancer) tick() {
	now := time.Now()
	r.refill(now)
	loads := r.src.WatchLoads()
	r.note(loads, now)
	var usable []balancer.WatchLoad
	for _, l := range loads {
		if l.Usable {
			usable = append(usable, l)
		}
	}
	blocked := map[string]int{}
	defer func() {
		for _, reason := range blockedReasons {
			r.blocked.WithLabelValues(reason).Set(float64(blocked[reason]))
		}
	}()
	targets := shares(usable)
	if len(usable) < 2 {
		r.spread.Set(0)
		return
	}
	if r.cfg.Freshness {
		r.freshen(usable, targets)
	}
	moved := map[*watchStream]bool{}
	for first := true; ; first = false {
		total := int64(0)
		for _, l := range usable {
			total += l.OpenLong
		}
		heavy, light, gap := extremes(usable, targets, total)
		if first {
			r.spread.Set(gap)
		}
		if light < 0 {
			return
		}
		inSet := 0
		for _, s := range targets {
			if s > 0 {
				inSet++
			}
		}
		// 1e-9: shares such as 1/3 are inexact, and an integer gap of 1
		// must not read as 1.0000000000000002.
		if gap <= max(1, r.cfg.Tolerance*float64(total)/float64(inSet))+1e-9 {
			return
		}
		// Only towards endpoints the placement sends watches to: the
		// client re-watches through a pick, which follows the policy.
		dest := make([]*readiness, 0, len(usable)-1)
		for i, l := range usable {
			if i != heavy && targets[i] > 0 {
				dest = append(dest, r.ready[l.Address])
			}
		}
		w, reasons := r.candidate(usable[heavy].Address, usable[light].Address, dest, now, moved)
		if w == nil {
			for k, v := range reasons {
				blocked[k] += v
			}
			return
		}
		if r.tokens < 1 {
			blocked[blockedRate]++
			return
		}
		moved[w] = true
		if !w.requestEnd() {
			continue
		}
		r.tokens--
		// The client re-watches on the lightest endpoint: count it there
		// already, so the next move of this tick is judged on that.
		usable[heavy].OpenLong--
		usable[light].OpenLong++
	}
}

// shares returns each usable endpoint's target share of the open
// long-running requests: the balancer's (WatchLoad.Share, the zone
// policy's), or 1/n each when it gives none (a LoadSource that predates
// zone placement).
func shares(usable []balancer.WatchLoad) []float64 {
	out := make([]float64, len(usable))
	sum := 0.0
	for i, l := range usable {
		out[i] = l.Share
		sum += l.Share
	}
	if sum <= 0 {
		for i := range out {
			out[i] = 1 / float64(len(out))
		}
	}
	return out
}

// extremes returns the indexes of the endpoint most above its target and
// of the one most below it among those with a share (-1 if none; the
// first in address order on ties), and the gap between their excesses.
// The target is share × total; with equal shares the gap is the
// difference of the open counts. An endpoint outside the placement's set
// (share 0) has all its watches as excess.
func extremes(ls []balancer.WatchLoad, targets []float64, total int64) (heavy, light int, gap float64) {
	light = -1
	excess := func(i int) float64 { return float64(ls[i].OpenLong) - targets[i]*float64(total) }
	for i := range ls {
		if excess(i) > excess(heavy) {
			heavy = i
		}
		if targets[i] > 0 && (light < 0 || excess(i) < excess(light)) {
			light = i
		}
	}
	if light < 0 {
		return heavy, -1, 0
	}
	return heavy, light, excess(heavy) - excess(light)
}

// candidate returns the oldest watch on endpoint that may be ended, or nil
// and why none may. A watch that light, the endpoint its client is
// expected to re-watch on, does not serve is passed over (version skew):
// its client would come back to an endpoint that serves it.
func (r *Rebalancer) candidate(endpoint, light string, targets []*readiness, now time.Time, skip map[*watchStream]bool) (*watchStream, map[string]int) {
	reasons := map[string]int{}
	for _, w := range r.set.on(endpoint) {
		if skip[w] || (r.cfg.Serves != nil && !r.cfg.Serves(light, w.api)) {
			continue
		}
		if reason := eligible(w.view(), targets, now, r.cfg.MinAge, r.cfg.Margin); reason != "" {
			reasons[reason]++
			continue
		}
		return w, nil
	}
	return nil, reasons
}

// eligible returns "" if ending the watch now makes its client re-watch
// on any of targets without a re-list, else the reason it does not:
//
//   - initial events: a WatchList cut before its closing bookmark restarts
//     the whole list;
//   - too young: client-go re-lists after a watch that closed within a
//     second without events; MinAge leaves a wide margin;
//   - not caught up: the client resumes from the resourceVersion of the
//     last event it got, and an apiserver whose watch cache started after
//     it answers 410 Gone, which makes the reflector re-list. So the watch
//     must have passed on an event Margin or more after each target became
//     usable and, once fanout has seen resourceVersions, one newer than
//     the highest it had seen by then. resourceVersions are etcd
//     revisions, one counter for all resources of an etcd3-backed
//     apiserver, so comparing across resources is sound. Once a
//     freshness request was answered, the watch must also have reached
//     that answer's resourceVersion (readiness.floor), a bound that does
//     not depend on how much fanout has seen.
//
// A target of nil is an endpoint the rebalancer has not seen become
// usable yet: nothing may move towards it.
func eligible(w watchView, targets []*readiness, now time.Time, minAge, margin time.Duration) string {
	switch {
	case !w.initialDone:
		return blockedInitialEvents
	case now.Sub(w.opened) < minAge:
		return blockedTooYoung
	}
	if !caughtUp(w, targets, margin) {
		return blockedNotCaughtUp
	}
	return ""
}

// caughtUp reports whether the watch passed on an event or bookmark that
// proves every target's watch cache holds the resourceVersion its client
// would resume from (eligible's "not caught up").
func caughtUp(w watchView, targets []*readiness, margin time.Duration) bool {
	for _, t := range targets {
		switch {
		case t == nil || !t.recorded:
			return false
		case w.lastAt.IsZero() || w.lastAt.Before(t.since.Add(margin)):
			return false
		case t.rv > 0 && w.lastRV <= t.rv:
			return false
		case w.lastRV < t.floor.Load():
			return false
		}
	}
	return true
}

// note records when each endpoint became usable and, Margin later, the
// highest resourceVersion passed on by then.
func (r *Rebalancer) note(loads []balancer.WatchLoad, now time.Time) {
	seen := make(map[string]bool, len(loads))
	for _, l := range loads {
		seen[l.Address] = true
		rd := r.ready[l.Address]
		if !l.Usable {
			delete(r.ready, l.Address)
			continue
		}
		if rd == nil || !rd.since.Equal(l.UsableSince) {
			rd = &readiness{since: l.UsableSince}
			r.ready[l.Address] = rd
		}
		if !rd.recorded && !now.Before(rd.since.Add(r.cfg.Margin)) {
			rd.recorded, rd.rv = true, r.maxRV.Load()
		}
	}
	for a := range r.ready {
		if !seen[a] {
			delete(r.ready, a)
		}
	}
	r.forgetFreshness()
}

// refill adds the tokens earned since the last tick: Rate per second, at
// most max(1, Rate) banked.
func (r *Rebalancer) refill(now time.Time) {
	if r.filled.IsZero() {
		r.filled, r.tokens = now, max(1, r.cfg.Rate)
		return
	}
	r.tokens = min(max(1, r.cfg.Rate), r.tokens+now.Sub(r.filled).Seconds()*r.cfg.Rate)
	r.filled = now
}

// sortByOpened sorts streams oldest first: those are closest to their own
// timeout, and their clients' caches the most settled.
func sortByOpened(ws []*watchStream) {
	slices.SortFunc(ws, func(a, b *watchStream) int { return a.opened.Compare(b.opened) })
}
