package cost

import (
	"cmp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the table to Prometheus, bounded: the top keys by
// cost get series of their own, every other key (and the evicted fold)
// is summed into one set of series with component="other" and the other
// labels empty. It reads the table at each scrape; the request path makes
// no Prometheus call.
//
// A key's cost is the seconds its short requests took plus the seconds
// its long-running ones were open, since the table started: the time
// kube-apiserver spent on it, roughly, with a watch's time counted as a
// request's. The exported set is sticky: a key stays exported until it
// leaves the table or another key's cost exceeds its own by overtakeRatio,
// so that series do not come and go between scrapes of close keys.
type Collector struct {
	t   *Table
	top int

	mu       sync.Mutex
	exported map[Key]struct{}
}

// overtakeRatio is how far a key's cost must exceed an exported key's to
// take its place.
const overtakeRatio = 1.25

// NewCollector returns the Collector of t (which may be nil: the table is
// off) exporting at most top keys.
func NewCollector(t *Table, top int) *Collector {
	return &Collector{t: t, top: top, exported: map[Key]struct{}{}}
}

var keyLabels = []string{"component", "verb", "group", "resource", "scope"}

var (
	descRequests = prometheus.NewDesc("fanout_cost_requests_total",
		"Requests answered, by the client component (program/controller from the User-Agent), verb, API group, resource (resource/subresource) and scope; the --cost-metrics-top costliest keys, the rest summed into component=\"other\".", keyLabels, nil)
	descErrors = prometheus.NewDesc("fanout_cost_errors_total",
		"Requests answered with an error, by class: 4xx, 5xx, failed (fanout got no answer and answered 502, 503 or 504 itself); keys as fanout_cost_requests_total.", append(keyLabels[:len(keyLabels):len(keyLabels)], "class"), nil)
	descRetries = prometheus.NewDesc("fanout_cost_retries_total",
		"Extra attempts fanout made for the requests; keys as fanout_cost_requests_total.", keyLabels, nil)
	descDuration = prometheus.NewDesc("fanout_cost_request_duration_seconds",
		"Time from a short request's start to the end of its answer's body (long-running requests are not observed); keys as fanout_cost_requests_total.", keyLabels, nil)
	descSent = prometheus.NewDesc("fanout_cost_sent_bytes_total",
		"Request body bytes sent to the apiservers; keys as fanout_cost_requests_total.", keyLabels, nil)
	descReceived = prometheus.NewDesc("fanout_cost_received_bytes_total",
		"Answer body bytes received from the apiservers; keys as fanout_cost_requests_total.", keyLabels, nil)
	descWatches = prometheus.NewDesc("fanout_cost_watches",
		"Watches (long-running requests answered 2xx) open now; keys as fanout_cost_requests_total.", keyLabels, nil)
	descWatchEvents = prometheus.NewDesc("fanout_cost_watch_events_total",
		"Watch events passed on to the client (counted only while the watch rebalancer is on); keys as fanout_cost_requests_total.", keyLabels, nil)
	descKeys = prometheus.NewDesc("fanout_cost_table_keys",
		"Keys in the cost table (at most --cost-table-size).", nil, nil)
	descEvictions = prometheus.NewDesc("fanout_cost_table_evictions_total",
		"Keys evicted from the cost table; their counts went to the \"other\" row.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descErrors, descRetries, descDuration, descSent, descReceived, descWatches, descWatchEvents, descKeys, descEvictions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.t.Snapshot()
	rows := s.Rows
	var other RowSnapshot
	if s.Evictions > 0 {
		// The table's own "other" row is last.
		other, rows = rows[len(rows)-1], rows[:len(rows)-1]
	}
	exported := c.choose(rows)
	for i := range rows {
		r := &rows[i]
		if exported[i] {
			emit(ch, r, r.Component, r.Verb, r.Group, resourceLabel(r), r.Scope)
			continue
		}
		other.add(r)
	}
	if c.t != nil {
		emit(ch, &other, Other, "", "", "", "")
	}
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(len(rows)))
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(s.Evictions))
}

// score is a key's cost for the ranking (see Collector).
func score(r *RowSnapshot) float64 { return r.Latency.Sum + r.watchSeconds }

// choose returns which of rows are exported, and remembers them: the
// exported keys still in the table, the costliest others while there is
// room, then others that overtake the cheapest exported ones.
func (c *Collector) choose(rows []RowSnapshot) []bool {
	out := make([]bool, len(rows))
	if c.top == 0 {
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Indices of the exported rows and of the candidates.
	var in, cand []int
	next := make(map[Key]struct{}, c.top)
	for i := range rows {
		k := rows[i].Key()
		if _, ok := c.exported[k]; ok {
			in = append(in, i)
		} else {
			cand = append(cand, i)
		}
	}
	byScore := func(a, b int) int { return cmp.Compare(score(&rows[b]), score(&rows[a])) }
	slices.SortFunc(in, byScore)
	slices.SortFunc(cand, byScore)
	// in is costliest first, cand too: fill the room, then swap the
	// cheapest exported for the costliest candidate while it overtakes.
	for len(in) < c.top && len(cand) > 0 {
		in, cand = append(in, cand[0]), cand[1:]
	}
	for len(cand) > 0 && len(in) > 0 {
		last := in[len(in)-1]
		if score(&rows[cand[0]]) <= overtakeRatio*score(&rows[last]) {
			break
		}
		in[len(in)-1] = cand[0]
		cand = cand[1:]
		slices.SortFunc(in, byScore)
	}
	for _, i := range in {
		out[i] = true
		next[rows[i].Key()] = struct{}{}
	}
	c.exported = next
	return out
}

// add sums r's counts into s.
func (s *RowSnapshot) add(r *RowSnapshot) {
	s.Requests += r.Requests
	s.Errors.Status4xx += r.Errors.Status4xx
	s.Errors.Status5xx += r.Errors.Status5xx
	s.Errors.Failed += r.Errors.Failed
	s.Retries += r.Retries
	s.Latency.Count += r.Latency.Count
	s.Latency.Sum += r.Latency.Sum
	s.BytesSent += r.BytesSent
	s.BytesReceived += r.BytesReceived
	s.WatchesOpen += r.WatchesOpen
	s.WatchEvents += r.WatchEvents
	s.watchSeconds += r.watchSeconds
}

func resourceLabel(r *RowSnapshot) string {
	if r.Subresource == "" {
		return r.Resource
	}
	return r.Resource + "/" + r.Subresource
}

// emit writes the series of one key (or of "other") with the label values
// lv, in the order of keyLabels.
func emit(ch chan<- prometheus.Metric, r *RowSnapshot, lv ...string) {
	counter := func(d *prometheus.Desc, v int64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(lv[:len(lv):len(lv)], extra...)...)
	}
	counter(descRequests, r.Requests)
	counter(descErrors, r.Errors.Status4xx, "4xx")
	counter(descErrors, r.Errors.Status5xx, "5xx")
	counter(descErrors, r.Errors.Failed, "failed")
	counter(descRetries, r.Retries)
	ch <- prometheus.MustNewConstSummary(descDuration, uint64(max(r.Latency.Count, 0)), r.Latency.Sum, nil, lv...)
	counter(descSent, r.BytesSent)
	counter(descReceived, r.BytesReceived)
	ch <- prometheus.MustNewConstMetric(descWatches, prometheus.GaugeValue, float64(r.WatchesOpen), lv...)
	counter(descWatchEvents, r.WatchEvents)
}
