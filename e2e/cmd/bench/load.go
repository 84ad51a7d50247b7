package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// LoadResult is what one phase of load produced.
type LoadResult struct {
	// Latencies of the successful requests; for open loop, measured from
	// each request's due time.
	Latencies []time.Duration
	Sent, OK  int
	Errors    int
	FirstErr  error
	// Elapsed runs from the first due time (or start) to the last response.
	Elapsed time.Duration
}

// Throughput is successful requests per second.
func (r LoadResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// requestFunc sends one request and consumes its response.
type requestFunc func(ctx context.Context) error

// errOverloaded marks a request the open loop did not send because too many
// were already in flight: counted as an error, never as a latency.
var errOverloaded = errors.New("not sent: too many requests in flight")

// OpenLoop sends rate requests per second for d on a fixed schedule
// starting now; see RunSchedule.
func OpenLoop(ctx context.Context, do requestFunc, rate float64, d time.Duration, maxInflight int) LoadResult {
	return RunSchedule(ctx, do, NewSchedule(time.Now().Add(5*time.Millisecond), rate, d), maxInflight)
}

// RunSchedule sends each request of s when it is due, each on a goroutine
// of its own, so slow responses never delay later sends, and measures its
// latency from the due time, so a late sender (a stalled load generator) adds
// to latency instead of hiding it. At most maxInflight requests are
// outstanding; a request due beyond that is counted as an error instead of
// queueing without bound.
func RunSchedule(ctx context.Context, do requestFunc, s Schedule, maxInflight int) LoadResult {
	lat := make([]time.Duration, s.Total)
	errs := make([]error, s.Total)
	var inflight atomic.Int64
	var wg sync.WaitGroup
	var lastDone atomic.Int64
	next := 0
	for next < s.Total && ctx.Err() == nil {
		due := s.Due(time.Now())
		for ; next < due; next++ {
			if inflight.Load() >= int64(maxInflight) {
				errs[next] = errOverloaded
				continue
			}
			i, at := next, s.At(next)
			inflight.Add(1)
			wg.Go(func() {
				defer inflight.Add(-1)
				err := do(ctx)
				now := time.Now()
				if err != nil {
					errs[i] = err
				} else {
					lat[i] = now.Sub(at)
				}
				for {
					old := lastDone.Load()
					if now.UnixNano() <= old || lastDone.CompareAndSwap(old, now.UnixNano()) {
						break
					}
				}
			})
		}
		if next < s.Total {
			time.Sleep(time.Until(s.At(next)))
		}
	}
	wg.Wait()
	res := LoadResult{Sent: next}
	for i := 0; i < next; i++ {
		if errs[i] != nil {
			res.Errors++
			if res.FirstErr == nil {
				res.FirstErr = errs[i]
			}
			continue
		}
		res.OK++
		res.Latencies = append(res.Latencies, lat[i])
	}
	if ld := lastDone.Load(); ld > 0 {
		res.Elapsed = time.Unix(0, ld).Sub(s.Start)
	}
	return res
}

// ClosedLoop runs workers goroutines that each send a request as soon as
// the previous one returned, for d: the saturation throughput.
func ClosedLoop(ctx context.Context, do requestFunc, workers int, d time.Duration) LoadResult {
	start := time.Now()
	deadline := start.Add(d)
	type part struct {
		lat      []time.Duration
		ok, errs int
		firstErr error
	}
	parts := make([]part, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := &parts[w]
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				if err := do(ctx); err != nil {
					p.errs++
					if p.firstErr == nil {
						p.firstErr = err
					}
					continue
				}
				p.ok++
				p.lat = append(p.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	res := LoadResult{Elapsed: time.Since(start)}
	for _, p := range parts {
		res.OK += p.ok
		res.Errors += p.errs
		res.Latencies = append(res.Latencies, p.lat...)
		if res.FirstErr == nil {
			res.FirstErr = p.firstErr
		}
	}
	res.Sent = res.OK + res.Errors
	return res
}

// clientGoIdlePerHost is client-go's MaxIdleConnsPerHost
// (k8s.io/apimachinery/pkg/util/net.SetTransportDefaults).
const clientGoIdlePerHost = 25

// newH1Client talks plain HTTP/1.1 with a keep-alive pool, as client-go
// does to an http:// server (fanout's and HAProxy's loopback listeners).
func newH1Client(idlePerHost int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: idlePerHost,
		MaxIdleConns:        max(100, idlePerHost),
		IdleConnTimeout:     90 * time.Second,
	}}
}

// newH2Client talks HTTP/2 over mTLS, as client-go does to an apiserver.
func newH2Client(tlsConf *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConf,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: clientGoIdlePerHost,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// getter returns a requestFunc that GETs url and reads the whole body,
// failing on any status but 200.
func getter(c *http.Client, url string, timeout time.Duration) requestFunc {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "fanout-bench")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return err
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int64 { return c.n.Add(1) - 1 }
