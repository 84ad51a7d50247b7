package top

import (
	"math"
	"slices"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/cost"
)

// Rates is one row of the view: a key's rates over the window, its open
// watches now, and its cumulative counters.
type Rates struct {
	cost.Key
	// Per second over the window.
	Requests, Errors, Retries, BytesReceived, BytesSent, WatchEvents float64
	// ErrorRatio is errors over requests in the window, 0 without requests.
	ErrorRatio float64
	// P99 is the 99th percentile of short requests' latency in seconds,
	// NaN when none finished in the window (see Quantile).
	P99         float64
	WatchesOpen int64
	// Delta holds the counters of the window, Cumulative those of the
	// current snapshot.
	Delta, Cumulative cost.RowSnapshot
}

// EndpointRate is an apiserver's load over the window.
type EndpointRate struct {
	balancer.EndpointStatus
	// Share of the requests all endpoints finished in the window, NaN when
	// none did.
	Share    float64
	Requests float64 // per second
}

// View is what one frame of fanout top shows.
type View struct {
	// Window is the span the rates cover. SinceStart is true when there
	// is no earlier snapshot of the same table (the first look, or fanout
	// restarted): the rates then average over the table's whole life.
	Window     time.Duration
	SinceStart bool
	Since, Now time.Time
	Capacity   int
	Evictions  int64
	// Keys counts the table's rows, the "other" row excluded.
	Keys      int
	Rows      []Rates
	Total     Rates
	Endpoints []EndpointRate
}

// Compute turns two snapshots into rates. prev may be nil (the first
// look): the rates then average since the table started counting.
//
// Keys come and go between snapshots: a key seen for the first time, or
// one whose counters went back (evicted, then seen again), counts all it
// has. An evicted key's counters are folded into the "other" row, so the
// part of them already counted under the key in prev is taken out of the
// "other" row's delta again: the rows add up to what really happened in
// the window.
func Compute(prev *Snapshot, cur Snapshot) View {
	v := View{
		Since: cur.Cost.Since, Now: cur.Cost.Now, Capacity: cur.Cost.Capacity, Evictions: cur.Cost.Evictions,
		SinceStart: prev == nil || !prev.Cost.Since.Equal(cur.Cost.Since) || !cur.Cost.Now.After(prev.Cost.Now),
	}
	before := map[cost.Key]cost.RowSnapshot{}
	if v.SinceStart {
		v.Window = cur.Cost.Now.Sub(cur.Cost.Since)
	} else {
		v.Window = cur.Cost.Now.Sub(prev.Cost.Now)
		for _, r := range prev.Cost.Rows {
			before[r.Key()] = r
		}
	}
	// folded is what prev counted under keys that were evicted since.
	var folded cost.RowSnapshot
	deltas := make([]cost.RowSnapshot, len(cur.Cost.Rows))
	seen := map[cost.Key]bool{}
	for i, r := range cur.Cost.Rows {
		seen[r.Key()] = true
		p, ok := before[r.Key()]
		switch {
		case !ok || r.Component == cost.Other:
			deltas[i] = r
		case wentBack(r, p):
			deltas[i] = r
			add(&folded, p)
		default:
			deltas[i] = minus(r, p)
		}
	}
	for k, p := range before {
		if !seen[k] && k.Component != cost.Other {
			add(&folded, p)
		}
	}
	for i, r := range cur.Cost.Rows {
		if r.Component != cost.Other {
			v.Keys++
			continue
		}
		if !v.SinceStart {
			p := before[r.Key()] // zero when the first evictions came in the window
			add(&p, folded)
			deltas[i] = minus(r, p)
		}
	}
	var total cost.RowSnapshot
	for i, r := range cur.Cost.Rows {
		v.Rows = append(v.Rows, rates(r.Key(), deltas[i], r, v.Window))
		add(&total, deltas[i])
		total.WatchesOpen += r.WatchesOpen
	}
	v.Total = rates(cost.Key{Component: "total"}, total, total, v.Window)
	v.Endpoints = endpointRates(prev, cur, v.SinceStart, v.Window)
	return v
}

func rates(k cost.Key, d, cum cost.RowSnapshot, window time.Duration) Rates {
	per := func(n int64) float64 {
		if window <= 0 {
			return 0
		}
		return float64(n) / window.Seconds()
	}
	r := Rates{
		Key:           k,
		Requests:      per(d.Requests),
		Errors:        per(errorCount(d.Errors)),
		Retries:       per(d.Retries),
		BytesReceived: per(d.BytesReceived),
		BytesSent:     per(d.BytesSent),
		WatchEvents:   per(d.WatchEvents),
		P99:           Quantile(0.99, d.Latency.Buckets),
		WatchesOpen:   cum.WatchesOpen,
		Delta:         d,
		Cumulative:    cum,
	}
	if d.Requests > 0 {
		r.ErrorRatio = float64(errorCount(d.Errors)) / float64(d.Requests)
	}
	return r
}

// endpointRates is each endpoint's share of the requests finished in the
// window. The endpoints have no timestamp of their own; they are read
// right after the cost table, so the table's window serves for both.
func endpointRates(prev *Snapshot, cur Snapshot, sinceStart bool, window time.Duration) []EndpointRate {
	before := map[string]uint64{}
	if !sinceStart {
		for _, e := range prev.Endpoints.Endpoints {
			before[e.Address] = e.RequestsTotal
		}
	}
	out := make([]EndpointRate, len(cur.Endpoints.Endpoints))
	var total uint64
	deltas := make([]uint64, len(out))
	for i, e := range cur.Endpoints.Endpoints {
		deltas[i] = e.RequestsTotal
		if p, ok := before[e.Address]; ok && p <= e.RequestsTotal {
			deltas[i] -= p // else new, or fanout restarted: all of it counts
		}
		total += deltas[i]
	}
	for i, e := range cur.Endpoints.Endpoints {
		out[i] = EndpointRate{EndpointStatus: e, Share: math.NaN()}
		if total > 0 {
			out[i].Share = float64(deltas[i]) / float64(total)
		}
		if window > 0 {
			out[i].Requests = float64(deltas[i]) / window.Seconds()
		}
	}
	return out
}

// Quantile estimates the q-quantile of the observations in cumulative
// buckets (the last one +Inf) as Prometheus' histogram_quantile does: it
// finds the bucket that holds the rank q*count and interpolates linearly
// within it, taking 0 as the lower bound of the first bucket; a rank in the
// +Inf bucket gives the highest finite bound. NaN without observations.
func Quantile(q float64, buckets []cost.Bucket) float64 {
	if len(buckets) < 2 || !math.IsInf(buckets[len(buckets)-1].LE, 1) {
		return math.NaN()
	}
	// Counts that go down (a torn read) would make the search meaningless;
	// like Prometheus, take them as flat.
	counts := make([]float64, len(buckets))
	for i, b := range buckets {
		counts[i] = float64(b.Count)
		if i > 0 && counts[i] < counts[i-1] {
			counts[i] = counts[i-1]
		}
	}
	n := counts[len(counts)-1]
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	// The first bucket whose count reaches the rank.
	b, _ := slices.BinarySearch(counts[:len(counts)-1], rank)
	if b == len(buckets)-1 {
		return buckets[b-1].LE
	}
	upper := buckets[b].LE
	if b == 0 && upper <= 0 {
		return upper
	}
	lower, below := 0.0, 0.0
	if b > 0 {
		lower, below = buckets[b-1].LE, counts[b-1]
	}
	return lower + (upper-lower)*(rank-below)/(counts[b]-below)
}

// each calls f on every counter of a with the same counter of b, and
// g on the latency sum. Buckets match by position when their bounds do;
// a that has no buckets yet takes b's bounds.
func each(a *cost.RowSnapshot, b cost.RowSnapshot, f func(x *int64, y int64), g func(x *float64, y float64)) {
	for _, c := range []struct {
		x *int64
		y int64
	}{
		{&a.Requests, b.Requests}, {&a.Errors.Status4xx, b.Errors.Status4xx}, {&a.Errors.Status5xx, b.Errors.Status5xx},
		{&a.Errors.Failed, b.Errors.Failed}, {&a.Retries, b.Retries}, {&a.Latency.Count, b.Latency.Count},
		{&a.BytesSent, b.BytesSent}, {&a.BytesReceived, b.BytesReceived}, {&a.WatchEvents, b.WatchEvents},
	} {
		f(c.x, c.y)
	}
	g(&a.Latency.Sum, b.Latency.Sum)
	if len(a.Latency.Buckets) == 0 && len(b.Latency.Buckets) > 0 {
		for _, bk := range b.Latency.Buckets {
			a.Latency.Buckets = append(a.Latency.Buckets, cost.Bucket{LE: bk.LE})
		}
	}
	for i := range a.Latency.Buckets {
		var y int64
		if i < len(b.Latency.Buckets) && b.Latency.Buckets[i].LE == a.Latency.Buckets[i].LE {
			y = b.Latency.Buckets[i].Count
		}
		f(&a.Latency.Buckets[i].Count, y)
	}
	if a.ListObjects != nil || b.ListObjects != nil {
		var x, y int64
		if a.ListObjects != nil {
			x = *a.ListObjects
		}
		if b.ListObjects != nil {
			y = *b.ListObjects
		}
		f(&x, y)
		a.ListObjects = &x
	}
}

// clone copies r, so that each may change the copy's buckets.
func clone(r cost.RowSnapshot) cost.RowSnapshot {
	r.Latency.Buckets = slices.Clone(r.Latency.Buckets)
	if r.ListObjects != nil {
		n := *r.ListObjects
		r.ListObjects = &n
	}
	return r
}

// minus is a-b counter by counter, 0 where b is larger.
func minus(a, b cost.RowSnapshot) cost.RowSnapshot {
	d := clone(a)
	each(&d, b, func(x *int64, y int64) { *x -= min(*x, y) }, func(x *float64, y float64) { *x = max(*x-y, 0) })
	return d
}

// add adds b's counters to a's.
func add(a *cost.RowSnapshot, b cost.RowSnapshot) {
	*a = clone(*a)
	each(a, b, func(x *int64, y int64) { *x += y }, func(x *float64, y float64) { *x += y })
}

// wentBack reports whether a counter of a is below b's.
func wentBack(a, b cost.RowSnapshot) bool {
	back := false
	a = clone(a)
	each(&a, b, func(x *int64, y int64) { back = back || *x < y }, func(x *float64, y float64) { back = back || *x < y })
	return back
}
