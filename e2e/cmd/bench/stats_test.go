package main

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Microsecond
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one value", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd count", ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		// Nearest rank: ceil(0.5*4) = 2nd value, no interpolation.
		{"median of even count", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 1, 100 * time.Millisecond},
		{"p99.9 of 1..1000 µs", thousand, 0.999, 999 * time.Microsecond},
		{"p50 of 1..1000 µs", thousand, 0.5, 500 * time.Microsecond},
		{"tiny q is the min", hundred, 0.0001, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.q); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", len(tc.sorted), tc.q, got, tc.want)
			}
		})
	}
}

func TestSummarizeDoesNotNeedSortedInputAndKeepsIt(t *testing.T) {
	in := []time.Duration{5, 1, 4, 2, 3}
	s := Summarize(in)
	if s.N != 5 || s.P50 != 3 || s.P99 != 5 || s.P999 != 5 {
		t.Errorf("Summarize = %+v, want N 5, p50 3, p99 5, p99.9 5", s)
	}
	if in[0] != 5 || in[1] != 1 {
		t.Errorf("Summarize reordered its input: %v", in)
	}
}

func TestMedian(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"odd", []float64{3, 1, 2}, 2},
		{"even averages the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"NaN left out", []float64{nan, 10, nan, 20, 30}, 20},
		{"one", []float64{42}, 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Median(tc.in); got != tc.want {
				t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	for _, in := range [][]float64{nil, {nan, nan}} {
		if got := Median(in); !math.IsNaN(got) {
			t.Errorf("Median(%v) = %v, want NaN", in, got)
		}
	}
	if got := MedianDuration([]time.Duration{3, 1, 2}); got != 2 {
		t.Errorf("MedianDuration = %v, want 2", got)
	}
}
