package main

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-quantile (0 < q <= 1) of sorted by the
// nearest-rank method: the smallest value with at least q of the values at
// or below it. It returns 0 for no values. sorted must be ascending.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// LatencySummary is what the report shows of one set of latencies.
type LatencySummary struct {
	N              int
	P50, P99, P999 time.Duration
}

// Summarize sorts a copy of lat and reads its percentiles.
func Summarize(lat []time.Duration) LatencySummary {
	s := slices.Clone(lat)
	slices.Sort(s)
	return LatencySummary{N: len(s), P50: Percentile(s, 0.50), P99: Percentile(s, 0.99), P999: Percentile(s, 0.999)}
}

// Median returns the median of xs (the mean of the two middle values for an
// even count), or NaN for none. NaN inputs (a metric a run could not
// measure) are left out.
func Median(xs []float64) float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// MedianDuration is Median over durations.
func MedianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	m := Median(xs)
	if math.IsNaN(m) {
		return 0
	}
	return time.Duration(m)
}
