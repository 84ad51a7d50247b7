package apis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/loops"
	"github.com/fanout-dev/fanout/resolver"
)

// Defaults of Config.
const (
	DefaultInterval = 30 * time.Second
	DefaultTimeout  = 10 * time.Second
)

// acceptAggregated asks for aggregated discovery, with the legacy
// documents as the fallback of an apiserver that does not serve it
// (client-go's discovery client asks the same way).
const acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

// userAgent names the discovery reads in the apiservers' logs and audit.
const userAgent = "fanout-discovery"

// maxBody bounds a discovery document; kube-apiserver's /apis is about
// 100 KiB with every built-in group and a few hundred CRDs.
const maxBody = 16 << 20

// Upstream returns the connection pool for an endpoint; the engine gives
// the prober's pools (health.Upstream), which carry the sidecar's
// credentials on connections of their own. For is called concurrently.
type Upstream interface {
	For(address string, mode transport.AuthMode) http.RoundTripper
}

// Sink takes each new routing table; *balancer.Balancer is one. SetAPIs
// is called from the discoverer's goroutines, one at a time.
type Sink interface {
	SetAPIs(balancer.APIs)
}

// Config configures a Discoverer.
type Config struct {
	// Interval between two reads of one endpoint's discovery
	// (--discovery-interval). Zero means DefaultInterval.
	Interval time.Duration
	// Timeout of one read (every document of it). Zero means
	// DefaultTimeout, capped at Interval.
	Timeout time.Duration
}

// Validate reports an invalid field in terms of its flag.
func (c Config) Validate() error {
	if c.Interval < 0 || c.Timeout < 0 {
		return fmt.Errorf("--discovery-interval must not be negative, got %s", c.Interval)
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
	return c
}

// Discoverer reads each endpoint's discovery (/api and /apis, aggregated,
// with ETags) and /version when the endpoint appears, when it becomes
// ready again (Refresh) and every Interval, and gives the sink a new
// Table whenever what an endpoint serves changed. A read that fails keeps
// the endpoint's last Set: the skew retry covers a Set gone stale.
//
// Update, Start and Stop serialise on mu, as the health prober's do; the
// read goroutines take only pubMu, to publish.
type Discoverer struct {
	cfg  Config
	up   Upstream
	sink Sink
	log  *slog.Logger

	reads   *prometheus.CounterVec
	bytes   prometheus.Counter
	skew    prometheus.Gauge
	version *prometheus.GaugeVec
	merges  *prometheus.CounterVec

	// merged is the union of the endpoints' discovery while their
	// documents differ, nil while they agree (Answer, serve.go).
	merged atomic.Pointer[merged]

	mu      sync.Mutex
	running bool
	want    []string
	loops   loops.Set

	pubMu   sync.Mutex
	sets    map[string]*Set // the endpoints' known Sets
	current *Table          // last published
	logged  string          // the partial group/versions last logged
}

// Results of fanout_discovery_reads_total.
const (
	resultChanged   = "changed"
	resultUnchanged = "unchanged"
	resultFailed    = "failed"
)

// New returns a stopped Discoverer for cfg, which passed Validate.
func New(cfg Config, up Upstream, sink Sink, log *slog.Logger) (*Discoverer, error) {
	if up == nil || sink == nil {
		return nil, errors.New("apis: New needs an Upstream and a Sink")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Discoverer{
		cfg: cfg.withDefaults(), up: up, sink: sink, log: log,
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_discovery_reads_total",
			Help: "Reads of an endpoint's discovery (GET /api and /apis, aggregated, with If-None-Match), by result: changed (a document changed, /version read too), unchanged (every document answered 304 Not Modified), failed.",
		}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fanout_discovery_received_bytes_total",
			Help: "Bytes of discovery documents and /version received from the endpoints.",
		}),
		skew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fanout_apis_differ",
			Help: "1 while the endpoints whose discovery is known serve different group/versions or resources (version skew): requests then go only to endpoints that serve them.",
		}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fanout_endpoint_version_info",
			Help: "1 for each endpoint's kube-apiserver version (its /version gitVersion), once its discovery has been read.",
		}, []string{"endpoint", "version"}),
		merges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fanout_discovery_merged_total",
			Help: "Discovery requests fanout answered itself, from the union of the endpoints' discovery, while their documents differ (304s included), by form: aggregated (apidiscovery.k8s.io/v2) or legacy.",
		}, []string{"form"}),
		sets: map[string]*Set{},
	}
	for _, r := range []string{resultChanged, resultUnchanged, resultFailed} {
		d.reads.WithLabelValues(r)
	}
	for _, f := range []string{formAggregated, formLegacy} {
		d.merges.WithLabelValues(f)
	}
	return d, nil
}

// Collectors returns the discoverer's metrics. Register them once.
func (d *Discoverer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.reads, d.bytes, d.skew, d.version, d.merges}
}

// Update replaces the endpoint set with a full snapshot: new endpoints
// are read at once, removed ones are forgotten (Update returns once their
// goroutines ended). It does not retain eps.
func (d *Discoverer) Update(eps []resolver.Endpoint) {
	addrs := make([]string, len(eps))
	for i, e := range eps {
		addrs[i] = e.Address
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want = addrs
	if d.running {
		d.syncLocked()
	}
}

// Start begins reading the latest snapshot's endpoints. It does not block.
func (d *Discoverer) Start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running = true
	d.syncLocked()
}

// Stop ends every read and waits for the goroutines.
func (d *Discoverer) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running = false
	d.syncLocked()
}

// Refresh asks for the endpoint's discovery to be read now, as when it
// becomes ready again after a restart, maybe as another release. It does
// not block; unknown addresses are ignored.
func (d *Discoverer) Refresh(address string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loops.Refresh(address)
}

// syncLocked makes the goroutines match want (none unless running). d.mu
// is held.
func (d *Discoverer) syncLocked() {
	stopped := d.loops.Sync(loops.Keep(d.running, d.want), d.run, nil)
	if len(stopped) > 0 {
		d.pubMu.Lock()
		for _, a := range stopped {
			delete(d.sets, a)
			d.version.DeletePartialMatch(prometheus.Labels{"endpoint": a})
		}
		d.publishLocked()
		d.pubMu.Unlock()
	}
}

// etags are an endpoint's last documents' ETags, by path.
type etags map[string]string

// run reads addr's discovery at once, then every Interval and on Refresh,
// until ctx ends.
func (d *Discoverer) run(ctx context.Context, addr string, refresh <-chan struct{}) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	tags := etags{}
	var docs map[string][]byte // the last documents, by path
	for {
		next, changed, err := d.read(ctx, addr, tags, docs)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			d.reads.WithLabelValues(resultFailed).Inc()
			d.log.Debug("reading the endpoint's discovery failed; its last known APIs stay", "endpoint", addr, "reason", err.Error())
		case !changed:
			d.reads.WithLabelValues(resultUnchanged).Inc()
		default:
			d.reads.WithLabelValues(resultChanged).Inc()
			docs = next.docs
			d.pubMu.Lock()
			if old := d.sets[addr]; old != nil && old.Version != next.set.Version {
				d.version.DeleteLabelValues(addr, old.Version)
			}
			d.sets[addr] = next.set
			if next.set.Version != "" {
				d.version.WithLabelValues(addr, next.set.Version).Set(1)
			}
			d.publishLocked()
			d.pubMu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-refresh:
		}
	}
}

// readResult is one complete read: the Set and the documents it came
// from, kept to rebuild the Set when only some documents changed.
type readResult struct {
	set  *Set
	docs map[string][]byte
}

// read fetches /api and /apis with If-None-Match. When both answer 304
// it returns changed false; otherwise it builds the Set from the new and
// the kept documents, with /version.
func (d *Discoverer) read(ctx context.Context, addr string, tags etags, docs map[string][]byte) (readResult, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	next := map[string][]byte{}
	// The ETags are kept only with the documents they came with: after a
	// read that fails halfway, a 304 must not stand for a document that
	// was never kept.
	nextTags := etags{}
	changed := false
	for _, path := range []string{"/api", "/apis"} {
		tag := ""
		if docs[path] != nil {
			tag = tags[path]
		}
		body, newTag, modified, err := d.get(ctx, addr, path, acceptAggregated, tag)
		if err != nil {
			return readResult{}, false, err
		}
		if !modified && docs[path] != nil {
			next[path], nextTags[path] = docs[path], tag
			continue
		}
		changed = true
		next[path], nextTags[path] = body, newTag
	}
	if !changed {
		return readResult{}, false, nil
	}
	b := newBuilder()
	aggregated := 0
	for _, path := range []string{"/api", "/apis"} {
		ok, err := b.addAggregated(next[path])
		if err != nil {
			return readResult{}, false, fmt.Errorf("GET %s: %w", path, err)
		}
		if ok {
			aggregated++
		} else {
			delete(nextTags, path) // the legacy documents are read in full each time
			if err := d.legacy(ctx, addr, b, path, next[path]); err != nil {
				return readResult{}, false, err
			}
		}
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	body, _, _, err := d.get(ctx, addr, "/version", "application/json", "")
	if err != nil {
		return readResult{}, false, err
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return readResult{}, false, fmt.Errorf("GET /version: %w", err)
	}
	clear(tags)
	maps.Copy(tags, nextTags)
	set := b.set(v.GitVersion)
	if aggregated == 2 {
		set.core, set.groups = next["/api"], next["/apis"]
	}
	return readResult{set: set, docs: next}, true, nil
}

// legacy adds the resources of a legacy /api or /apis document: one
// APIResourceList per group/version.
func (d *Discoverer) legacy(ctx context.Context, addr string, b *builder, path string, doc []byte) error {
	type gv struct{ group, version string }
	var gvs []gv
	if path == "/api" {
		var v apiVersions
		if err := json.Unmarshal(doc, &v); err != nil {
			return fmt.Errorf("GET /api: %w", err)
		}
		for _, ver := range v.Versions {
			gvs = append(gvs, gv{"", ver})
		}
	} else {
		var l apiGroupList
		if err := json.Unmarshal(doc, &l); err != nil {
			return fmt.Errorf("GET /apis: %w", err)
		}
		for _, g := range l.Groups {
			for _, ver := range g.Versions {
				gvs = append(gvs, gv{g.Name, ver.Version})
			}
		}
	}
	for _, x := range gvs {
		p := "/apis/" + x.group + "/" + x.version
		if x.group == "" {
			p = "/api/" + x.version
		}
		body, _, _, err := d.get(ctx, addr, p, "application/json", "")
		if err != nil {
			return err
		}
		var rl apiResourceList
		if err := json.Unmarshal(body, &rl); err != nil {
			return fmt.Errorf("GET %s: %w", p, err)
		}
		b.add(x.group, x.version, "")
		for _, r := range rl.Resources {
			b.add(x.group, x.version, r.Name)
		}
	}
	return nil
}

// get fetches path from addr with the sidecar's credentials. modified is
// false for a 304 to If-None-Match etag.
func (d *Discoverer) get(ctx context.Context, addr, path, accept, etag string) (body []byte, tag string, modified bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return nil, "", false, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", userAgent)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := d.up.For(addr, transport.AuthSidecar).RoundTrip(req)
	if err != nil {
		return nil, "", false, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	d.bytes.Add(float64(len(body)))
	switch {
	case err != nil:
		return nil, "", false, fmt.Errorf("GET %s: %w", path, err)
	case resp.StatusCode == http.StatusNotModified:
		return nil, etag, false, nil
	case resp.StatusCode == http.StatusUnauthorized:
		transport.RenewAfterUnauthorized(resp)
		return nil, "", false, fmt.Errorf("GET %s: %s", path, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, "", false, fmt.Errorf("GET %s: %s", path, resp.Status)
	case len(body) > maxBody:
		return nil, "", false, fmt.Errorf("GET %s: larger than %d bytes", path, maxBody)
	}
	return body, resp.Header.Get("ETag"), true, nil
}

// publishLocked gives the sink a new Table of the known Sets and logs a
// change in whether, and in what, the endpoints differ. d.pubMu is held.
func (d *Discoverer) publishLocked() {
	sets := make(map[string]*Set, len(d.sets))
	for a, s := range d.sets {
		sets[a] = s
	}
	t := NewTable(sets)
	d.current = t
	// The sink learns last, so that whoever waits on it sees the log too.
	defer d.sink.SetAPIs(t)
	differ := 0.0
	if t.differ {
		differ = 1
	}
	d.skew.Set(differ)
	m, err := mergeSets(sets)
	if err != nil {
		d.log.Warn("merging the endpoints' discovery failed; discovery requests go to the apiservers unchanged", "reason", err.Error())
	}
	d.merged.Store(m)
	gvs, n := t.partial()
	key := fmt.Sprint(t.differ, gvs, m != nil)
	if key == d.logged {
		return
	}
	wasDiffering := strings.HasPrefix(d.logged, "true")
	d.logged = key
	switch {
	case t.differ:
		d.log.Info("endpoints serve different APIs: requests go only to endpoints that serve their group/version and resource",
			"versions", t.versions(), "partialGroupVersions", strings.Join(gvs, " "), "partialCount", n, "discoveryMerged", m != nil)
	case wasDiffering:
		d.log.Info("endpoints serve the same APIs again", "versions", t.versions())
	}
}

// mergeSets returns the union of the sets' aggregated discovery when
// their documents differ; nil when they agree, or when one of them is
// not aggregated discovery (an apiserver older than 1.30): then discovery
// requests go through.
func mergeSets(sets map[string]*Set) (*merged, error) {
	var core, groups [][]byte
	for _, s := range sets {
		if s.core == nil || s.groups == nil {
			return nil, nil
		}
		core, groups = append(core, s.core), append(groups, s.groups)
	}
	if len(distinctDocs(core)) < 2 && len(distinctDocs(groups)) < 2 {
		return nil, nil
	}
	return newMerged(core, groups)
}

// Table returns the last published table, nil before the first read.
func (d *Discoverer) Table() *Table {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	return d.current
}

// ReadySink is the health prober's sink (health.Sink).
type ReadySink interface {
	SetReady(address string, ready bool)
}

// RefreshOnReady returns next decorated so that an endpoint whose probe
// turns ready again has its discovery read at once: a restarted apiserver
// may be another release.
func (d *Discoverer) RefreshOnReady(next ReadySink) ReadySink {
	return &refreshOnReady{next: next, d: d, ready: map[string]bool{}}
}

type refreshOnReady struct {
	next  ReadySink
	d     *Discoverer
	mu    sync.Mutex
	ready map[string]bool
}

func (r *refreshOnReady) SetReady(address string, ready bool) {
	r.next.SetReady(address, ready)
	r.mu.Lock()
	was, seen := r.ready[address]
	r.ready[address] = ready
	r.mu.Unlock()
	if ready && seen && !was {
		r.d.Refresh(address)
	}
}
