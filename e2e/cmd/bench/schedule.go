package main

import (
	"math"
	"time"
)

// Schedule is a fixed open-loop plan: request i (0-based) is due at
// Start + i/Rate, whatever happened to the requests before it. Latency is
// measured from the due time, not from when the request was actually sent,
// so a stalled proxy (or a stalled load generator) shows up as queueing
// delay instead of silently lowering the offered rate (coordinated omission).
type Schedule struct {
	Start time.Time
	Rate  float64 // requests per second, > 0
	Total int
}

// NewSchedule plans rate requests per second for d, starting at start.
func NewSchedule(start time.Time, rate float64, d time.Duration) Schedule {
	return Schedule{Start: start, Rate: rate, Total: int(rate * d.Seconds())}
}

// At is when request i is due.
func (s Schedule) At(i int) time.Time {
	return s.Start.Add(time.Duration(float64(i) / s.Rate * float64(time.Second)))
}

// Due is how many requests are due at now: those with At(i) <= now, at most
// Total.
func (s Schedule) Due(now time.Time) int {
	el := now.Sub(s.Start)
	if el < 0 {
		return 0
	}
	n := int(math.Floor(el.Seconds()*s.Rate)) + 1
	// Float rounding can put the boundary one request off; At is the truth.
	for n > 0 && s.At(n-1).After(now) {
		n--
	}
	for n < s.Total && !s.At(n).After(now) {
		n++
	}
	return min(n, s.Total)
}
