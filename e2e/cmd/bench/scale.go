package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ScaleResult is section 3 of the report for one proxy, against the fast
// backends.
type ScaleResult struct {
	Target        string
	Watches       int
	WatchesOpen   int // watches that got their response headers
	WatchInterval time.Duration
	Duration      time.Duration
	// Elapsed is how long the phase really took (the open loop ends when
	// its last response does).
	Elapsed        time.Duration
	Rate           float64
	Events         int64 // watch events received during the measured phase
	ExpectedEvents int64
	Requests       LoadResult
	Lat            LatencySummary
	IdleRSSMiB     float64
	PeakRSSMiB     float64 // VmHWM at the end, watches and requests included
	CPUSeconds     float64 // during the measured phase
	ListBytes      int64   // what the LIST client received
	ListWant       int64   // what the backend was asked to send (at least)
	ListDuration   time.Duration
	ListIdleRSSMiB float64
	ListPeakRSSMiB float64
	ListErr        string
	// WatchConns are the client connections open to the proxy with every
	// watch open (WatchDials: dialed until then), RequestConns those the
	// short requests opened during the phase (dialed): one per concurrent
	// request over HTTP/1.1, few over HTTP/2 (fanout --listen-tls).
	WatchConns, WatchDials, RequestConns int64
}

// CPUPercent is the proxy's CPU use during the measured phase, in % of one
// core.
func (s *ScaleResult) CPUPercent() float64 {
	if s.Elapsed <= 0 {
		return math.NaN()
	}
	return 100 * s.CPUSeconds / s.Elapsed.Seconds()
}

// runScale opens opts.Watches watches through a fresh proxy (fanout or
// HAProxy), then adds opts.ScaleRate short requests per second for
// opts.ScaleDuration while the watches receive their events; then a fresh
// proxy streams one LIST of opts.ListBytes.
func runScale(ctx context.Context, env *overheadEnv, target string) (*ScaleResult, error) {
	o := env.opts
	res := &ScaleResult{Target: target, Watches: o.Watches, WatchInterval: o.WatchInterval, Duration: o.ScaleDuration, Rate: o.ScaleRate, ListWant: o.ListBytes}
	f, err := env.startProxy(ctx, target, "scale-"+target)
	if err != nil {
		return nil, err
	}
	defer f.Stop()
	sleepCtx(ctx, o.IdleWait)
	u, err := f.Usage()
	if err != nil {
		return nil, err
	}
	res.IdleRSSMiB = float64(u.RSSKiB) / 1024

	// Each watch holds one HTTP/1.1 connection, as client-go's watches do
	// over http://; over TLS (fanout --listen-tls) they share HTTP/2
	// connections, as client-go's do over https://.
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	wc := proxyClient(f, o.Watches)
	var watchConns, reqConns connCount
	countConns(wc, &watchConns)
	// A watch that never gets its headers must not stall the opening loop.
	wc.Transport.(*http.Transport).ResponseHeaderTimeout = 30 * time.Second
	defer wc.CloseIdleConnections()
	var events atomic.Int64
	var open atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWatches()
	sem := make(chan struct{}, 50) // open them at a bounded pace
	var firstErr atomic.Pointer[error]
	for i := range o.Watches {
		sem <- struct{}{}
		wg.Go(func() {
			url := fmt.Sprintf("%s/api/v1/namespaces/bench/configmaps?watch=true&labelSelector=w%%3D%d", f.URL, i)
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, url, nil)
			resp, err := wc.Do(req)
			<-sem
			if err != nil {
				if wctx.Err() == nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err := fmt.Errorf("watch: %s", resp.Status)
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			open.Add(1)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				events.Add(1)
			}
		})
	}
	// Wait for every watch to be open (or to have failed).
	deadline := time.Now().Add(time.Minute)
	for open.Load() < int64(o.Watches) && firstErr.Load() == nil && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	res.WatchesOpen = int(open.Load())
	if p := firstErr.Load(); p != nil {
		return nil, fmt.Errorf("opening %d watches through %s (%d open): %w", o.Watches, target, open.Load(), *p)
	}
	// Settle first: net/http closes surplus HTTP/2 connections dialed by
	// requests that started together.
	sleepCtx(ctx, time.Second)
	res.WatchConns, res.WatchDials = watchConns.open.Load(), watchConns.dialed.Load()
	env.logf("scale: %s: %d watches open on %d client connections (%d dialed)", target, res.WatchesOpen, res.WatchConns, res.WatchDials)

	before, err := f.Usage()
	if err != nil {
		return nil, err
	}
	ev0 := events.Load()
	t0 := time.Now()
	rc := proxyClient(f, o.IdlePerHost)
	countConns(rc, &reqConns)
	defer rc.CloseIdleConnections()
	res.Requests = OpenLoop(ctx, getter(rc, f.URL+shortPath, 10*time.Second), o.ScaleRate, o.ScaleDuration, o.MaxInflight)
	res.Events = events.Load() - ev0
	res.RequestConns = reqConns.dialed.Load()
	res.Elapsed = time.Since(t0)
	res.ExpectedEvents = int64(float64(o.Watches) * res.Elapsed.Seconds() / o.WatchInterval.Seconds())
	res.Lat = Summarize(res.Requests.Latencies)
	after, err := f.Usage()
	if err != nil {
		return nil, err
	}
	res.CPUSeconds = after.CPUSeconds() - before.CPUSeconds()
	res.PeakRSSMiB = float64(after.HWMKiB) / 1024
	env.logf("scale: %s: %d events, %.0f req/s, cpu %.2fs, peak rss %.1f MiB, short-request connections dialed %d", target, res.Events, res.Requests.Throughput(), res.CPUSeconds, res.PeakRSSMiB, res.RequestConns)
	stopWatches()
	wg.Wait()
	f.Stop()

	if err := runList(ctx, env, target, res); err != nil {
		res.ListErr = err.Error()
	}
	return res, nil
}

// runList streams one big LIST through a fresh proxy.
func runList(ctx context.Context, env *overheadEnv, target string, res *ScaleResult) error {
	f, err := env.startProxy(ctx, target, "list-"+target)
	if err != nil {
		return err
	}
	defer f.Stop()
	sleepCtx(ctx, env.opts.IdleWait)
	u, err := f.Usage()
	if err != nil {
		return err
	}
	res.ListIdleRSSMiB = float64(u.RSSKiB) / 1024
	c := proxyClient(f, 1)
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+bigListPath, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	res.ListDuration = time.Since(start)
	res.ListBytes = n
	if err != nil {
		return fmt.Errorf("reading the LIST after %d bytes: %w", n, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("LIST: %s", resp.Status)
	}
	u, err = f.Usage()
	if err != nil {
		return err
	}
	res.ListPeakRSSMiB = float64(u.HWMKiB) / 1024
	env.logf("scale: %s: LIST of %d bytes in %s, peak rss %.1f MiB", target, n, res.ListDuration.Round(time.Millisecond), res.ListPeakRSSMiB)
	return nil
}
