package main

import (
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewSchedule(start, 1000, 3*time.Second)
	if s.Total != 3000 {
		t.Fatalf("Total = %d, want 3000", s.Total)
	}
	for _, tc := range []struct {
		at   time.Duration // after start
		want int
	}{
		{-time.Millisecond, 0},
		{0, 1}, // request 0 is due at start
		{999 * time.Microsecond, 1},
		{time.Millisecond, 2},
		{time.Second - time.Nanosecond, 1000},
		{time.Second, 1001},
		{2*time.Second + 500*time.Microsecond, 2001},
		{3 * time.Second, 3000}, // capped at Total
		{time.Hour, 3000},
	} {
		if got := s.Due(start.Add(tc.at)); got != tc.want {
			t.Errorf("Due(start+%v) = %d, want %d", tc.at, got, tc.want)
		}
	}
	if got, want := s.At(1500), start.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Errorf("At(1500) = %v, want %v", got, want)
	}
}

// The schedule does not drift: at any instant, Due agrees with At for
// rates whose period is not a whole number of nanoseconds.
func TestScheduleDueAgreesWithAt(t *testing.T) {
	start := time.Unix(1_700_000_000, 123)
	for _, rate := range []float64{3, 7, 1000, 5000, 3333} {
		s := NewSchedule(start, rate, 2*time.Second)
		for i := 0; i < s.Total; i += 1 + s.Total/97 {
			at := s.At(i)
			if got := s.Due(at); got != i+1 {
				t.Fatalf("rate %v: Due(At(%d)) = %d, want %d", rate, i, got, i+1)
			}
			if got := s.Due(at.Add(-time.Nanosecond)); got != i {
				t.Fatalf("rate %v: Due(At(%d)-1ns) = %d, want %d", rate, i, got, i)
			}
		}
	}
}
