package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
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

// A late sender does not hide latency (no coordinated omission): with a
// schedule whose first 20 requests were due 200 ms before it runs, their
// latencies include the time they waited to be sent.
func TestRunScheduleCountsLatenessOfTheSender(t *testing.T) {
	do := func(ctx context.Context) error { return nil }
	s := NewSchedule(time.Now().Add(-200*time.Millisecond), 100, 400*time.Millisecond)
	res := RunSchedule(context.Background(), do, s, 1000)
	if res.OK != 40 {
		t.Fatalf("ok %d, want 40", res.OK)
	}
	late := 0
	for _, l := range res.Latencies {
		if l >= 10*time.Millisecond {
			late++
		}
	}
	// Requests 0..19 were due 10 to 200 ms before the run started.
	if late < 19 {
		t.Errorf("%d of 40 latencies at or above 10 ms, want the 19 or more sent late: %v", late, res.Latencies)
	}
	if s := Summarize(res.Latencies); s.P99 < 190*time.Millisecond {
		t.Errorf("p99 %s: the first request's 200 ms wait is not counted", s.P99)
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

// TestCountConns checks the connection counter against a real HTTP/1.1
// server: concurrent requests each need a connection, and closing the
// idle ones brings the open count back to zero.
func TestCountConns(t *testing.T) {
	release := make(chan struct{})
	var arrived sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
	}))
	defer srv.Close()
	c := newH1Client(10)
	var n connCount
	countConns(c, &n)
	const parallel = 3
	arrived.Add(parallel)
	var done sync.WaitGroup
	for range parallel {
		done.Go(func() {
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	arrived.Wait()
	if d, o := n.dialed.Load(), n.open.Load(); d != parallel || o != parallel {
		t.Errorf("with %d requests in flight: dialed %d, open %d; want %d and %d", parallel, d, o, parallel, parallel)
	}
	close(release)
	done.Wait()
	c.CloseIdleConnections()
	if o := n.open.Load(); o != 0 {
		t.Errorf("after CloseIdleConnections: %d open, want 0", o)
	}
}
