package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The open loop keeps its schedule when responses are slow: every request
// is sent, the phase does not stretch to requests × latency, and latency
// counts from the due time.
func TestOpenLoopDoesNotWaitForResponses(t *testing.T) {
	const delay = 100 * time.Millisecond
	var inflight, peak atomic.Int64
	do := func(ctx context.Context) error {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(delay)
		inflight.Add(-1)
		return nil
	}
	res := OpenLoop(context.Background(), do, 200, 500*time.Millisecond, 1000)
	if res.Sent != 100 || res.OK != 100 || res.Errors != 0 {
		t.Fatalf("sent %d, ok %d, errors %d; want 100 sent and ok", res.Sent, res.OK, res.Errors)
	}
	// Closed loop would take 100 × 100 ms = 10 s.
	if res.Elapsed > 3*time.Second {
		t.Errorf("elapsed %s: the open loop waited for responses", res.Elapsed)
	}
	if peak.Load() < 5 {
		t.Errorf("at most %d requests in flight: the open loop does not overlap them", peak.Load())
	}
	for _, l := range res.Latencies {
		if l < delay {
			t.Fatalf("latency %s below the %s the request took", l, delay)
		}
	}
}

// A stall delays every request queued behind it, and the latencies say so
// (no coordinated omission): with one request at a time and a 300 ms stall
// on the first, later requests' latencies include their wait.
func TestOpenLoopCountsQueueingBehindAStall(t *testing.T) {
	gate := make(chan struct{}, 1)
	gate <- struct{}{}
	var n atomic.Int64
	do := func(ctx context.Context) error {
		<-gate
		defer func() { gate <- struct{}{} }()
		if n.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	}
	res := OpenLoop(context.Background(), do, 100, 200*time.Millisecond, 1000)
	if res.OK != 20 {
		t.Fatalf("ok %d, want 20", res.OK)
	}
	s := Summarize(res.Latencies)
	// The 10th request was due at 90 ms and could not start before 300 ms.
	if s.P50 < 150*time.Millisecond {
		t.Errorf("p50 %s: queueing behind the stall is not counted", s.P50)
	}
}

func TestOpenLoopCapsInflight(t *testing.T) {
	release := make(chan struct{})
	do := func(ctx context.Context) error { <-release; return nil }
	done := make(chan LoadResult)
	go func() { done <- OpenLoop(context.Background(), do, 1000, 100*time.Millisecond, 10) }()
	time.Sleep(300 * time.Millisecond)
	close(release)
	res := <-done
	if res.Sent != 100 || res.OK != 10 || res.Errors != 90 || !errors.Is(res.FirstErr, errOverloaded) {
		t.Errorf("sent %d ok %d errors %d first %v; want 100, 10, 90, overloaded", res.Sent, res.OK, res.Errors, res.FirstErr)
	}
}

func TestClosedLoop(t *testing.T) {
	var calls atomic.Int64
	do := func(ctx context.Context) error {
		if calls.Add(1)%4 == 0 {
			return errors.New("boom")
		}
		time.Sleep(10 * time.Millisecond)
		return nil
	}
	res := ClosedLoop(context.Background(), do, 2, 300*time.Millisecond)
	if res.OK < 10 || res.Errors == 0 || res.Sent != res.OK+res.Errors || len(res.Latencies) != res.OK {
		t.Errorf("closed loop: %+v", res)
	}
	// Two workers, 10 ms each: at most ~60 successes in 300 ms.
	if res.OK > 80 {
		t.Errorf("%d ok from 2 workers in 300 ms: not closed loop", res.OK)
	}
}
