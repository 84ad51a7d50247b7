// Package top computes and renders `fanout top`: per-key rates, error
// shares and p99 latency from two snapshots of a sidecar's cost table
// (/debug/cost) and the apiservers' share of requests (/debug/endpoints).
// Everything but Fetch is a pure function of the snapshots, so the table
// is tested without a terminal or a sidecar.
package top

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fanout-dev/fanout/components/admin"
)

// Cost is what /debug/cost serves: the cost table's counters, cumulative
// since Since.
type Cost struct {
	Since     time.Time `json:"since"`
	Now       time.Time `json:"now"`
	Capacity  int       `json:"capacity"`
	Evictions uint64    `json:"evictions"`
	Rows      []Row     `json:"rows"`
}

// Key identifies a row of the cost table.
type Key struct {
	Component   string `json:"component"`
	Verb        string `json:"verb"`
	Group       string `json:"group"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	Scope       string `json:"scope"`
}

// OtherComponent is the component of the row that holds evicted keys.
const OtherComponent = "other"

// Row is one key's cumulative counters.
type Row struct {
	Key
	Requests      uint64  `json:"requests"`
	Errors        Errors  `json:"errors"`
	Retries       uint64  `json:"retries"`
	Latency       Latency `json:"latency_seconds"`
	BytesSent     uint64  `json:"bytes_sent"`
	BytesReceived uint64  `json:"bytes_received"`
	WatchesOpen   int64   `json:"watches_open"`
	WatchEvents   uint64  `json:"watch_events"`
	ListObjects   *uint64 `json:"list_objects,omitempty"`
}

// Errors counts a key's failed requests by class; Failed is fanout's own
// 502/503/504, when no apiserver answered.
type Errors struct {
	Class4xx uint64 `json:"4xx"`
	Class5xx uint64 `json:"5xx"`
	Failed   uint64 `json:"failed"`
}

// Sum is all three classes.
func (e Errors) Sum() uint64 { return e.Class4xx + e.Class5xx + e.Failed }

// Latency is a cumulative histogram of short requests' durations.
type Latency struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one cumulative bucket: Count observations at most LE seconds.
type Bucket struct {
	LE    UpperBound `json:"le"`
	Count uint64     `json:"count"`
}

// UpperBound is a bucket's bound in seconds. JSON has no infinity, so
// /debug/cost writes the last bound as the string "+Inf".
type UpperBound float64

func (u *UpperBound) UnmarshalJSON(b []byte) error {
	if string(b) == `"+Inf"` {
		*u = UpperBound(math.Inf(1))
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("bucket bound %s: expected a number or \"+Inf\"", b)
	}
	*u = UpperBound(f)
	return nil
}

func (u UpperBound) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(u), 1) {
		return []byte(`"+Inf"`), nil
	}
	return json.Marshal(float64(u))
}

// Snapshot is one look at a sidecar: its cost table, its endpoints, and
// when it was taken by the client.
type Snapshot struct {
	Cost      Cost
	Endpoints admin.Snapshot
}

// ErrTableOff means the sidecar's cost table is off.
var ErrTableOff = errors.New("the cost table is off (fanout runs with --cost-table-size 0): there is nothing to show; restart fanout with --cost-table-size above 0")

// Fetch reads /debug/cost and then /debug/endpoints from the admin server
// at addr (host:port). A failed fetch says what to do: run it in the pod
// (403), upgrade fanout or turn the table on (404).
func Fetch(ctx context.Context, c *http.Client, addr string) (Snapshot, error) {
	cost, err := fetchCost(ctx, c, addr)
	if err != nil {
		return Snapshot{}, err
	}
	// The endpoints come second: an address that does not answer fails
	// above with the cost table's own advice.
	eps, err := admin.FetchSnapshot(ctx, c, addr)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Cost: cost, Endpoints: eps}, nil
}

func fetchCost(ctx context.Context, c *http.Client, addr string) (Cost, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Cost{}, fmt.Errorf("--admin-address %q: %v; expected host:port such as 127.0.0.1:7081", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // the admin server's wildcard default; /debug answers loopback only
	}
	u := "http://" + net.JoinHostPort(host, port) + "/debug/cost"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Cost{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Cost{}, fmt.Errorf("reading %s: %w (is fanout running with --admin-address %s?)", u, err, addr)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Cost{}, fmt.Errorf("reading %s: %w", u, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		return Cost{}, fmt.Errorf("%s answered %s: the cost table answers loopback clients only; run fanout top in the pod: kubectl exec -it POD -c fanout -- fanout top", u, resp.Status)
	case http.StatusNotFound:
		return Cost{}, fmt.Errorf("%s answered %s: this fanout has no cost table (a version older than fanout top, or the table is off); upgrade the sidecar or start it with --cost-table-size above 0", u, resp.Status)
	default:
		return Cost{}, fmt.Errorf("%s answered %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var cost Cost
	if err := json.Unmarshal(body, &cost); err != nil {
		return Cost{}, fmt.Errorf("%s: not a fanout cost table: %w", u, err)
	}
	if cost.Capacity == 0 {
		return Cost{}, ErrTableOff
	}
	return cost, nil
}
