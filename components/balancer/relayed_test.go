package balancer

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The tests here pick short creates with finishOn; the picks that miss
// their endpoint answer 201 in 1ms.
var (
	createPick = PickInfo{Kind: Short, Class: ClassCreate}
	created    = DoneInfo{StatusCode: 201, Latency: time.Millisecond}
)

// TestRelayedResultsFeedNothing: results the proxy marks Relayed (another
// server's answer through kube-apiserver) neither fail, drain, penalise nor
// score the endpoint, whatever else they say; a dial failure still ejects.
func TestRelayedResultsFeedNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1")
		for range 20 {
			finishOn(t, b, createPick, "a:1", created, created)
		}
		before := status(t, b, "a:1")
		for _, di := range []DoneInfo{
			{StatusCode: 500, Failed: true, Latency: time.Second},
			{StatusCode: 503, ShuttingDown: true, Latency: time.Second},
			{StatusCode: 429, Overloaded: true, Latency: time.Second},
			{Err: errors.New("stream reset by the backend"), Failed: true},
		} {
			di.Relayed = true
			for range 2 * DefaultConsecutiveFailures {
				finishOn(t, b, createPick, "a:1", di, created)
			}
		}
		s := status(t, b, "a:1")
		if s.State != StateReady || s.ConsecutiveFailures != 0 || s.EjectionsTotal != 0 || s.ErrorsTotal != before.ErrorsTotal ||
			s.ShuttingDownUntil != "" || s.OverloadedUntil != "" {
			t.Errorf("after relayed failures: %+v, want ready with nothing counted against it", s)
		}
		if s.LatencyScore != before.LatencyScore {
			t.Errorf("latency score moved from %v to %v on relayed answers of 1s", before.LatencyScore, s.LatencyScore)
		}
		if want := before.RequestsTotal + 8*DefaultConsecutiveFailures; s.RequestsTotal != uint64(want) {
			t.Errorf("requests_total = %d, want %d: relayed requests still count as requests", s.RequestsTotal, want)
		}

		finishOn(t, b, createPick, "a:1", DoneInfo{Err: errors.New("dial tcp: connection refused"), Unavailable: true, Relayed: true}, created)
		if s := status(t, b, "a:1"); s.State != StateEjected || s.ErrorsTotal != before.ErrorsTotal+1 {
			t.Errorf("after a dial failure of a relayed request: %+v, want ejected with the error counted", s)
		}
	})
}
