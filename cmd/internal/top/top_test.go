package top

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/cost"
)

// bounds are /debug/cost's bucket bounds (docs/cost.md, GET /debug/cost).
var bounds = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, math.Inf(1)}

// hist builds cumulative buckets from the count in each bucket.
func hist(per ...int64) []cost.Bucket {
	var b []cost.Bucket
	var n int64
	for i, le := range bounds {
		if i < len(per) {
			n += per[i]
		}
		b = append(b, cost.Bucket{LE: le, Count: n})
	}
	return b
}

func TestQuantile(t *testing.T) {
	tests := []struct {
		name    string
		q       float64
		buckets []cost.Bucket
		want    float64
	}{
		// rank 99 of 100, all in (0.01, 0.025]: 0.01 + 0.015*99/100.
		{"interpolated in a bucket", 0.99, hist(0, 0, 100), 0.02485},
		// rank 9.9 of 10 in the first bucket, whose lower bound is 0.
		{"first bucket from zero", 0.99, hist(10), 0.00495},
		// rank 99 of 100: 90 below 0.1, the 10 of (0.1, 0.25] hold it.
		{"counts below the bucket", 0.99, hist(0, 0, 0, 0, 90, 10), 0.1 + 0.15*9/10},
		{"median", 0.5, hist(50, 50), 0.005},
		// histogram_quantile answers the highest finite bound.
		{"rank in +Inf", 0.99, hist(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 99), 30},
		{"no observations", 0.99, hist(), math.NaN()},
		{"no +Inf bucket", 0.99, hist(10)[:3], math.NaN()},
		// A count that goes down is taken as flat: 10, 10, 20.
		{"not monotonic", 0.5, []cost.Bucket{{LE: 0.1, Count: 10}, {LE: 0.2, Count: 5}, {LE: math.Inf(1), Count: 20}}, 0.1},
	}
	for _, tt := range tests {
		got := Quantile(tt.q, tt.buckets)
		if math.IsNaN(tt.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tt.want) > 1e-9) {
			t.Errorf("%s: Quantile(%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

var t0 = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)

func key(comp, verb, res string) cost.Key {
	return cost.Key{Component: comp, Verb: verb, Resource: res, Scope: cost.ScopeNamespaced}
}

func row(k cost.Key, requests int64, mod ...func(*cost.RowSnapshot)) cost.RowSnapshot {
	r := cost.RowSnapshot{
		Component: k.Component, Verb: k.Verb, Group: k.Group, Resource: k.Resource, Subresource: k.Subresource, Scope: k.Scope,
		Requests: requests, Latency: cost.Latency{Count: requests, Buckets: hist(requests)},
	}
	for _, m := range mod {
		m(&r)
	}
	return r
}

func snap(at time.Duration, rows ...cost.RowSnapshot) Snapshot {
	return Snapshot{Cost: cost.Snapshot{Since: t0, Now: t0.Add(at), Capacity: 100, Rows: rows}}
}

func find(t *testing.T, v View, k cost.Key) Rates {
	t.Helper()
	for _, r := range v.Rows {
		if r.Key == k {
			return r
		}
	}
	t.Fatalf("no row %v in %+v", k, v.Rows)
	return Rates{}
}

func TestComputeRates(t *testing.T) {
	a, b, c := key("kcm/replicaset-controller", "list", "pods"), key("kubelet", "get", "nodes"), key("kubectl", "create", "pods")
	other := cost.Key{Component: cost.Other}
	prev := snap(10*time.Second,
		row(a, 100, func(r *cost.RowSnapshot) {
			r.Errors.Status5xx, r.Retries, r.BytesReceived, r.WatchEvents, r.WatchesOpen = 1, 2, 1000, 5, 3
		}),
		row(b, 50),
		row(c, 40),
		row(other, 10))
	cur := snap(12*time.Second,
		row(a, 300, func(r *cost.RowSnapshot) {
			r.Errors.Status4xx, r.Errors.Status5xx, r.Retries, r.BytesReceived, r.BytesSent, r.WatchEvents, r.WatchesOpen = 4, 5, 6, 5096, 20, 25, 7
		}),
		row(b, 8),                            // evicted and back: its count starts again
		row(key("new", "get", "secrets"), 6), // first seen
		row(other, 10+50+40+4),               // b's 50 and c's 40 folded, then 4 more evicted requests
	)
	v := Compute(&prev, cur)
	if v.SinceStart || v.Window != 2*time.Second {
		t.Fatalf("window %s since start %v, want 2s between the snapshots", v.Window, v.SinceStart)
	}
	ra := find(t, v, a)
	for name, got := range map[string][2]float64{
		"requests/s":      {ra.Requests, 100},
		"errors/s":        {ra.Errors, 4},
		"error ratio":     {ra.ErrorRatio, 8.0 / 200},
		"retries/s":       {ra.Retries, 2},
		"received B/s":    {ra.BytesReceived, 2048},
		"sent B/s":        {ra.BytesSent, 10},
		"watch events/s":  {ra.WatchEvents, 10},
		"open watches":    {float64(ra.WatchesOpen), 7},
		"b after a reset": {find(t, v, b).Requests, 4},
		"a new key":       {find(t, v, key("new", "get", "secrets")).Requests, 3},
		"other":           {find(t, v, other).Requests, 2},
		"total":           {v.Total.Requests, 100 + 4 + 3 + 2},
	} {
		if math.Abs(got[0]-got[1]) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
	if ra.Cumulative.Requests != 300 || ra.Delta.Requests != 200 {
		t.Errorf("a: cumulative %d delta %d, want 300 and 200", ra.Cumulative.Requests, ra.Delta.Requests)
	}
	if v.Keys != 3 {
		t.Errorf("keys %d, want 3 (other excluded)", v.Keys)
	}

	// The first look, and a restarted fanout, average since the table started.
	restarted := cur
	restarted.Cost.Since = t0.Add(11 * time.Second)
	for name, p := range map[string]*Snapshot{"first": nil, "restarted": &prev} {
		c := cur
		if name == "restarted" {
			c = restarted
		}
		v := Compute(p, c)
		want := c.Cost.Now.Sub(c.Cost.Since)
		if !v.SinceStart || v.Window != want || find(t, v, a).Requests != 300/want.Seconds() {
			t.Errorf("%s: window %s since start %v rate %v, want %s since start", name, v.Window, v.SinceStart, find(t, v, a).Requests, want)
		}
	}
}

func TestComputeP99AndEndpoints(t *testing.T) {
	a := key("c", "get", "pods")
	prev := snap(0, row(a, 0, func(r *cost.RowSnapshot) { r.Latency.Buckets = hist(1000) }))
	// 100 new requests between 0.25 s and 0.5 s: the 1000 fast ones before
	// prev must not pull the p99 down.
	cur := snap(time.Second, row(a, 0, func(r *cost.RowSnapshot) { r.Latency.Buckets = hist(1000, 0, 0, 0, 0, 0, 100) }))
	eps := func(n ...uint64) admin.Snapshot {
		var s admin.Snapshot
		for i, r := range n {
			s.Endpoints = append(s.Endpoints, balancer.EndpointStatus{Address: fmt.Sprintf("10.0.0.%d:6443", i+1), State: "ready", RequestsTotal: r})
		}
		return s
	}
	prev.Endpoints, cur.Endpoints = eps(100, 100, 5), eps(175, 125, 1) // the third restarted its count
	v := Compute(&prev, cur)
	if got, want := find(t, v, a).P99, 0.25+0.25*99/100; math.Abs(got-want) > 1e-9 {
		t.Errorf("p99 %v, want %v (from the buckets' increase only)", got, want)
	}
	for i, want := range []float64{75.0 / 101, 25.0 / 101, 1.0 / 101} {
		if got := v.Endpoints[i].Share; math.Abs(got-want) > 1e-9 {
			t.Errorf("endpoint %d share %v, want %v", i, got, want)
		}
	}
	if v.Endpoints[0].Requests != 75 {
		t.Errorf("endpoint rate %v, want 75/s", v.Endpoints[0].Requests)
	}
}

func TestSort(t *testing.T) {
	rows := []Rates{
		{Key: key("a", "get", "x"), Requests: 10, BytesReceived: 1, P99: 0.5, Errors: 0},
		{Key: key("b", "get", "x"), Requests: 5, BytesReceived: 100, BytesSent: 1, P99: math.NaN(), Errors: 3},
		{Key: key("c", "get", "x"), Requests: 20, BytesSent: 50, P99: 0.01, Errors: 1},
		{Key: key("d", "get", "x"), Requests: 10, P99: 2},
	}
	for by, want := range map[SortKey]string{
		ByRequests: "c a d b", // a and d tie: by key
		ByBytes:    "b c a d",
		ByP99:      "d a c b", // no latency last
		ByErrors:   "b c a d", // a and d tie on errors and requests: by key
	} {
		Sort(rows, by)
		var got []string
		for _, r := range rows {
			got = append(got, r.Component)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("by %s: %s, want %s", by, strings.Join(got, " "), want)
		}
	}
}

// many is a snapshot pair with n keys, key i at i requests/s.
func many(n int) (*Snapshot, Snapshot) {
	var before, after []cost.RowSnapshot
	for i := range n {
		k := cost.Key{Component: fmt.Sprintf("kube-controller-manager/controller-%03d", i), Verb: "list", Group: "apps", Resource: "replicasets", Subresource: "status", Scope: "namespaced"}
		before = append(before, row(k, 0))
		after = append(after, row(k, int64(i)))
	}
	eps := admin.Snapshot{Ready: true, Endpoints: []balancer.EndpointStatus{{Address: "10.0.0.1:6443", State: "ready", RequestsTotal: 1}}}
	p := snap(0, before...)
	p.Endpoints = eps
	c := snap(time.Second, after...)
	c.Endpoints = eps
	return &p, c
}

func TestTableFits(t *testing.T) {
	prev, cur := many(50)
	tests := []struct {
		name          string
		width, height int
		lines         int    // 0: every row
		has, lacks    string // in the column titles
	}{
		{"a pipe: everything", 0, 0, 0, "RETRY/S", ""},
		{"wide", 200, 30, 30, "RETRY/S", ""},
		{"80 columns drop the least useful", 80, 24, 24, "P99", "RETRY/S"},
		{"narrow", 50, 10, 10, "REQ/S", "WATCHES"},
		{"too short for the header", 100, 3, 3, "", ""},
	}
	for _, tt := range tests {
		out := Render(prev, cur, Frame{Sort: ByRequests, Width: tt.width, Height: tt.height})
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if tt.lines > 0 && len(lines) != tt.lines {
			t.Errorf("%s: %d lines, want %d:\n%s", tt.name, len(lines), tt.lines, out)
		}
		if tt.lines == 0 && strings.Count(out, "/controller-") != 50 {
			t.Errorf("%s: not every row shown:\n%s", tt.name, out)
		}
		for _, l := range lines {
			if tt.width > 0 && len([]rune(l)) > tt.width {
				t.Errorf("%s: line wider than %d: %q", tt.name, tt.width, l)
			}
		}
		titles := -1
		for i, l := range lines {
			if strings.HasPrefix(l, "COMPONENT") {
				titles = i
			}
		}
		if titles < 0 {
			if tt.height > 3 {
				t.Errorf("%s: no column titles:\n%s", tt.name, out)
			}
			continue
		}
		if tt.has != "" && !strings.Contains(lines[titles], tt.has) || tt.lacks != "" && strings.Contains(lines[titles], tt.lacks) {
			t.Errorf("%s: titles %q, want %q and not %q", tt.name, lines[titles], tt.has, tt.lacks)
		}
		if tt.height > 3 {
			// The largest first, right under the titles, and the rest
			// summed up on the last line: the hidden rows are those at
			// 0..hidden-1 requests/s.
			shown := len(lines) - titles - 2
			hidden := 50 - shown
			if !strings.Contains(lines[titles+1], "-049 ") || !strings.Contains(lines[titles+1], " 49.0") {
				t.Errorf("%s: first row %q, want controller-049 at 49.0/s", tt.name, lines[titles+1])
			}
			want := fmt.Sprintf("... %d more rows: %s req/s", hidden, rate(float64(hidden*(hidden-1)/2)))
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, want) {
				t.Errorf("%s: last line %q, want %q", tt.name, last, want)
			}
		}
	}
	// Long names lose their middle: the program and the controller show.
	out := Render(prev, cur, Frame{Width: 80, Height: 24})
	if !strings.Contains(out, "kube-con…oller-049 list apps/rep…s/status") {
		t.Errorf("names not cut in the middle at 80 columns:\n%s", out)
	}
}

func TestTableHeader(t *testing.T) {
	prev, cur := many(3)
	cur.Endpoints.Endpoints = append(cur.Endpoints.Endpoints, balancer.EndpointStatus{Address: "10.0.0.2:6443", State: "ejected", RequestsTotal: 3, InflightShort: 2, InflightLong: 9})
	prev.Endpoints.Endpoints = append(prev.Endpoints.Endpoints, balancer.EndpointStatus{Address: "10.0.0.2:6443", State: "ready", RequestsTotal: 0})
	out := Render(prev, cur, Frame{Sort: ByP99, Keys: true})
	for _, want := range []string{
		"sorted by p99, rates over the last 1s",
		"keys: r requests/s  b bytes/s  p p99  e errors/s  q quit",
		"3 keys of 100",
		"total: 3.00 req/s",
		"apiserver 10.0.0.1:6443  ready    share 0.0%",
		"apiserver 10.0.0.2:6443  ejected  share 100.0%  3.00 req/s  in flight 2 short, 9 long",
		"histogram_quantile",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("header lacks %q:\n%s", want, out)
		}
	}
	if out := Render(nil, cur, Frame{}); !strings.Contains(out, "averaged since the table started (2026-12-04T03:00:00Z)") {
		t.Errorf("first look does not say it averages since start:\n%s", out)
	}
}

func TestJSON(t *testing.T) {
	prev, cur := many(3)
	cur.Cost.Rows[0].Latency = cost.Latency{} // no short request: p99 null
	b, err := JSON(Compute(prev, cur), ByRequests)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		Sort            string
		Rows            []struct {
			Component string
			Rates     map[string]*float64
			// Cumulative is as /debug/cost served it.
			Cumulative cost.RowSnapshot
		}
		Endpoints []map[string]any
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if got.IntervalSeconds != 1 || got.Sort != "requests" || len(got.Rows) != 3 || len(got.Endpoints) != 1 {
		t.Fatalf("unexpected JSON:\n%s", b)
	}
	first, last := got.Rows[0], got.Rows[2]
	if !strings.HasSuffix(first.Component, "002") || *first.Rates["requests_per_second"] != 2 || first.Cumulative.Requests != 2 {
		t.Errorf("first row %+v, want controller-002 at 2/s with 2 requests", first)
	}
	if p99, ok := last.Rates["p99_seconds"]; !ok || p99 != nil {
		t.Errorf("row without latency: p99_seconds %v, want null", p99)
	}
	if p99 := first.Rates["p99_seconds"]; p99 == nil || *p99 != 0.00495 {
		t.Errorf("p99_seconds %v, want 0.00495", p99)
	}
	if len(first.Cumulative.Latency.Buckets) != len(bounds) || !strings.Contains(string(b), `"le": "+Inf"`) {
		t.Errorf("cumulative buckets not as /debug/cost writes them:\n%s", b)
	}
	if got.Endpoints[0]["address"] != "10.0.0.1:6443" || got.Endpoints[0]["share"] != nil {
		t.Errorf("endpoint %v: want 10.0.0.1:6443 with share null (no request in the interval)", got.Endpoints[0])
	}
}
