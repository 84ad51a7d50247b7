package cost

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Config configures the table.
type Config struct {
	// Size is how many keys the table holds (--cost-table-size); 0 turns
	// it off.
	Size int
	// MetricsTop is how many keys the Collector exports to Prometheus
	// (--cost-metrics-top); the others are summed into component="other".
	MetricsTop int
}

// Defaults of Config.
const (
	DefaultSize       = 1000
	DefaultMetricsTop = 20
	// MaxSize bounds Size: a row is about 300 bytes with its key, so the
	// largest table holds under 40 MiB.
	MaxSize = 100_000
	// MaxMetricsTop bounds MetricsTop: 11 series a key, 5,500 at most.
	// More than Size exports Size.
	MaxMetricsTop = 500
)

// Validate reports the first field that cannot work, naming its flag.
func (c Config) Validate() error {
	if c.Size < 0 || c.Size > MaxSize {
		return fmt.Errorf("--cost-table-size must be within [0, %d] (0 turns the cost table off), got %d", MaxSize, c.Size)
	}
	if c.MetricsTop < 0 || c.MetricsTop > MaxMetricsTop {
		return fmt.Errorf("--cost-metrics-top must be within [0, %d], got %d: every exported key is 11 series", MaxMetricsTop, c.MetricsTop)
	}
	return nil
}

// uaCacheSize bounds the User-Agents whose component is remembered. A
// sidecar's client sends a few (one per controller); more only cost a
// parse each.
const uaCacheSize = 256

// maxCachedUserAgent is the longest User-Agent the cache keeps, so that
// it holds at most uaCacheSize of them in bytes too: a header may carry
// one of 1 MiB. kube-apiserver keeps as much of a User-Agent in its audit
// events and managedFields (maxUserAgentLength). Client-go's are far
// shorter; a longer one costs a parse per request.
const maxCachedUserAgent = 1024

// Table is the bounded table of who costs what. Create it with New; a nil
// *Table is off: Snapshot reports an empty table and the Collector
// exports nothing per key. All methods are safe for concurrent use.
//
// Locking: mu guards the LRUs, the evicted rows' folded counts and
// evictions; the counters themselves are atomics, updated without it.
type Table struct {
	size  int
	since time.Time

	mu        sync.Mutex
	rows      *simplelru.LRU[Key, *Row]
	agents    *simplelru.LRU[string, string]
	evictions int64
	other     Row
}

// New returns the table of c, nil when c.Size is 0.
func New(c Config) (*Table, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Size == 0 {
		return nil, nil
	}
	t := &Table{size: c.Size, since: time.Now()}
	t.other.key = Key{Component: Other}
	var err error
	if t.rows, err = simplelru.NewLRU(c.Size, t.evictedLocked); err != nil {
		return nil, err
	}
	if t.agents, err = simplelru.NewLRU[string, string](uaCacheSize, nil); err != nil {
		return nil, err
	}
	return t, nil
}

// The counters of a row, indexed.
const (
	cRequests = iota
	c4xx
	c5xx
	cFailed
	cRetries
	cLatencyCount
	cLatencyNanos
	cSent
	cReceived
	cWatches
	cWatchEvents
	cWatchNanos // time long-running requests were open, for the Collector's ranking
	cBucket0    // first of len(Buckets)+1 latency buckets, not cumulative
	nCounters   = cBucket0 + len(Buckets) + 1
)

// Buckets are the upper bounds, in seconds, of the latency histogram
// (the last bucket, +Inf, is implied).
var Buckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// bucketNanos is Buckets in nanoseconds, for the request path.
var bucketNanos = func() (b [len(Buckets)]int64) {
	for i, s := range Buckets {
		b[i] = int64(s * float64(time.Second))
	}
	return b
}()

// Row is one key's counts. The proxy keeps the Row of a long-running
// request from Open to Close; it has no other use outside the package.
type Row struct {
	key Key
	c   [nCounters]atomic.Int64
	// evicted is set, under the table's lock, when the key leaves the
	// table and its counts fold into the "other" row; folded (guarded by
	// the lock) is what was folded so far. A request still holding the
	// row (a watch, or an update that raced the eviction) moves what it
	// added since into "other" (afterUpdate), so no count is lost.
	evicted atomic.Bool
	folded  [nCounters]int64
}

// Outcome is what one request cost, as the proxy saw it.
type Outcome struct {
	// Code is the status the client got (fanout's own when Failed).
	Code int
	// Failed: fanout answered itself because it got no answer (its 502,
	// 503 or 504).
	Failed bool
	// Retries is the extra attempts fanout made.
	Retries int
	// Sent and Received are the request and answer body bytes to and
	// from the apiservers.
	Sent, Received int64
	// Elapsed is from the request's start to the end of the answer's
	// body: a short request's latency, a long-running one's open time.
	Elapsed time.Duration
}

// Short records a short request once its answer has ended. userAgent is
// the request's User-Agent header.
func (t *Table) Short(info *reqinfo.Info, userAgent string, o *Outcome) {
	r := t.row(info, userAgent)
	r.answered(o)
	r.c[cReceived].Add(o.Received)
	r.c[cLatencyCount].Add(1)
	r.c[cLatencyNanos].Add(int64(o.Elapsed))
	r.c[cBucket0+bucketOf(o.Elapsed)].Add(1)
	t.afterUpdate(r)
}

// Open records a long-running request once it is answered (o's Code,
// Failed, Retries and Sent), and returns its row for Close. A 2xx answer
// counts as an open watch until Close. Events counts the watch events
// passed on, as they are.
func (t *Table) Open(info *reqinfo.Info, userAgent string, o *Outcome) *Row {
	r := t.row(info, userAgent)
	r.answered(o)
	if isOpen(o.Code) {
		r.c[cWatches].Add(1)
	}
	t.afterUpdate(r)
	return r
}

// Events is the counter of watch events passed on for r, which the
// watch stream adds to as it passes them; nil for a nil r.
func (r *Row) Events() *atomic.Int64 {
	if r == nil {
		return nil
	}
	return &r.c[cWatchEvents]
}

// Close records the end of the long-running request Open returned r for:
// o is the same Outcome, now with Received and Elapsed.
func (t *Table) Close(r *Row, o *Outcome) {
	if isOpen(o.Code) {
		r.c[cWatches].Add(-1)
	}
	r.c[cReceived].Add(o.Received)
	r.c[cWatchNanos].Add(int64(o.Elapsed))
	t.afterUpdate(r)
}

func isOpen(code int) bool { return code/100 == 2 }

func (r *Row) answered(o *Outcome) {
	r.c[cRequests].Add(1)
	switch {
	case o.Failed:
		r.c[cFailed].Add(1)
	case o.Code >= 500 && o.Code < 600:
		r.c[c5xx].Add(1)
	case o.Code >= 400 && o.Code < 500:
		r.c[c4xx].Add(1)
	}
	if o.Retries > 0 {
		r.c[cRetries].Add(int64(o.Retries))
	}
	if o.Sent > 0 {
		r.c[cSent].Add(o.Sent)
	}
}

func bucketOf(d time.Duration) int {
	for i, b := range bucketNanos {
		if int64(d) <= b {
			return i
		}
	}
	return len(bucketNanos)
}

// row returns the row of the request: one lookup of its User-Agent and
// one of its key, under one lock. A new key is copied into the table.
func (t *Table) row(info *reqinfo.Info, userAgent string) *Row {
	t.mu.Lock()
	c, ok := t.agents.Get(userAgent)
	if !ok {
		c = strings.Clone(component(userAgent))
		if len(userAgent) <= maxCachedUserAgent {
			t.agents.Add(strings.Clone(userAgent), c)
		}
	}
	k := keyOf(info, c)
	r, ok := t.rows.Get(k)
	if !ok {
		k = k.clone()
		r = &Row{key: k}
		t.rows.Add(k, r)
	}
	t.mu.Unlock()
	return r
}

// evictedLocked is the LRU's eviction callback, run by Add under t.mu.
func (t *Table) evictedLocked(_ Key, r *Row) {
	r.evicted.Store(true)
	t.foldLocked(r)
	t.evictions++
}

// foldLocked moves what r counted since its last fold into "other".
func (t *Table) foldLocked(r *Row) {
	for i := range r.c {
		cur := r.c[i].Load()
		if d := cur - r.folded[i]; d != 0 {
			t.other.c[i].Add(d)
			r.folded[i] = cur
		}
	}
}

// afterUpdate folds what was just added to an evicted row. The row's
// counters are added before evicted is read, and evictedLocked sets it
// before reading them: an update that reads false was already folded.
func (t *Table) afterUpdate(r *Row) {
	if r.evicted.Load() {
		t.mu.Lock()
		t.foldLocked(r)
		t.mu.Unlock()
	}
}
