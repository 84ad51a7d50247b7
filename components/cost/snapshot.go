package cost

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Snapshot is the table as /debug/cost serves it (docs/cost.md). All
// counters are cumulative since Since; rates are two snapshots apart.
type Snapshot struct {
	Since time.Time `json:"since"`
	Now   time.Time `json:"now"`
	// Capacity is Config.Size; 0 means the table is off.
	Capacity  int   `json:"capacity"`
	Evictions int64 `json:"evictions"`
	// Rows are every key in the table, least recently used first, then
	// the "other" row once anything was evicted.
	Rows []RowSnapshot `json:"rows"`
}

// RowSnapshot is one key's counts.
type RowSnapshot struct {
	Component   string `json:"component"`
	Verb        string `json:"verb"`
	Group       string `json:"group"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	Scope       string `json:"scope"`

	Requests      int64   `json:"requests"`
	Errors        Errors  `json:"errors"`
	Retries       int64   `json:"retries"`
	Latency       Latency `json:"latency_seconds"`
	BytesSent     int64   `json:"bytes_sent"`
	BytesReceived int64   `json:"bytes_received"`
	WatchesOpen   int64   `json:"watches_open"`
	WatchEvents   int64   `json:"watch_events"`
	// ListObjects is never known: counting them would mean parsing LIST
	// bodies (docs/cost.md). It is in the contract for a later change.
	ListObjects *int64 `json:"list_objects,omitempty"`

	// watchSeconds ranks the key for the Collector; not served.
	watchSeconds float64
}

// Key is the row's key.
func (r *RowSnapshot) Key() Key {
	return Key{r.Component, r.Verb, r.Group, r.Resource, r.Subresource, r.Scope}
}

// Errors counts the answers by class.
type Errors struct {
	Status4xx int64 `json:"4xx"`
	Status5xx int64 `json:"5xx"`
	// Failed is fanout's own 502, 503 or 504: it got no answer.
	Failed int64 `json:"failed"`
}

// Latency is the histogram of short requests' latency.
type Latency struct {
	Count   int64    `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one cumulative bucket; LE is +Inf for the last, which JSON
// spells "+Inf".
type Bucket struct {
	LE    float64
	Count int64
}

type bucketJSON struct {
	LE    any   `json:"le"`
	Count int64 `json:"count"`
}

// MarshalJSON writes le as a number, or the string "+Inf".
func (b Bucket) MarshalJSON() ([]byte, error) {
	var le any = b.LE
	if math.IsInf(b.LE, 1) {
		le = "+Inf"
	}
	return json.Marshal(bucketJSON{LE: le, Count: b.Count})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (b *Bucket) UnmarshalJSON(data []byte) error {
	var v bucketJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch le := v.LE.(type) {
	case float64:
		b.LE = le
	case string:
		if le != "+Inf" {
			return fmt.Errorf("bucket le %q: want a number or \"+Inf\"", le)
		}
		b.LE = math.Inf(1)
	default:
		return fmt.Errorf("bucket le %v: want a number or \"+Inf\"", v.LE)
	}
	b.Count = v.Count
	return nil
}

// Snapshot returns the table's counts now. A nil table is off: it
// reports capacity 0 and no rows.
func (t *Table) Snapshot() Snapshot {
	if t == nil {
		now := time.Now().UTC()
		return Snapshot{Since: now, Now: now, Rows: []RowSnapshot{}}
	}
	t.mu.Lock()
	rows := make([]RowSnapshot, 0, t.rows.Len()+1)
	for _, r := range t.rows.Values() {
		rows = append(rows, r.snapshot())
	}
	evictions := t.evictions
	t.mu.Unlock()
	// "other" is read without the lock: its counters only grow (but for
	// the watches gauge), and a fold in flight shows in the next one.
	if evictions > 0 {
		rows = append(rows, t.other.snapshot())
	}
	return Snapshot{
		Since:     t.since.UTC(),
		Now:       time.Now().UTC(),
		Capacity:  t.size,
		Evictions: evictions,
		Rows:      rows,
	}
}

func (r *Row) snapshot() RowSnapshot {
	var c [nCounters]int64
	for i := range c {
		c[i] = r.c[i].Load()
	}
	s := RowSnapshot{
		Component: r.key.Component, Verb: r.key.Verb, Group: r.key.Group,
		Resource: r.key.Resource, Subresource: r.key.Subresource, Scope: r.key.Scope,
		Requests:      c[cRequests],
		Errors:        Errors{Status4xx: c[c4xx], Status5xx: c[c5xx], Failed: c[cFailed]},
		Retries:       c[cRetries],
		BytesSent:     c[cSent],
		BytesReceived: c[cReceived],
		WatchesOpen:   c[cWatches],
		WatchEvents:   c[cWatchEvents],
		Latency: Latency{
			Count:   c[cLatencyCount],
			Sum:     time.Duration(c[cLatencyNanos]).Seconds(),
			Buckets: make([]Bucket, 0, len(Buckets)+1),
		},
		watchSeconds: time.Duration(c[cWatchNanos]).Seconds(),
	}
	var cum int64
	for i := 0; i <= len(Buckets); i++ {
		cum += c[cBucket0+i]
		le := math.Inf(1)
		if i < len(Buckets) {
			le = Buckets[i]
		}
		s.Latency.Buckets = append(s.Latency.Buckets, Bucket{LE: le, Count: cum})
	}
	return s
}
