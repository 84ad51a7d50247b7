package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestRestartGapFigures measures what a client sees while fanout is
// SIGKILLed and started again after a kubelet-like delay, without and with
// `fanout hold` (issue 33). It is a measurement, not a check: it runs only
// with FANOUT_RESTART_GAP=CYCLES (e.g. 10) and logs a table:
//
//	FANOUT_RESTART_GAP=10 go test -count=1 -v -run TestRestartGapFigures ./cmd/fanout/
//
// The client is an HTTP/1.1 http.Client with client-go's transport
// settings (client-go speaks HTTP/1.1 to an http:// server), sending
// GETs and POSTs alternately at a steady rate; the upstream answers after
// 5 ms. Outcomes: ok, delayed (answered, but over 100 ms), refused
// (ECONNREFUSED: nobody listened), reset/EOF (a connection broke under
// the request), other. client-go would retry the GETs that broke
// (IsConnectionReset, IsProbableEOF), not a refusal and not a POST.
// Broken requests are sorted by what broke them (brokenWhen).
//
// More settings, all optional:
//
//	FANOUT_RESTART_GAP_RATE=N      requests a second (200)
//	FANOUT_RESTART_GAP_DELAY=D     from the kill to the new fanout's start (1s)
//	FANOUT_RESTART_GAP_SPACING=D   kill D after fanout is back, whether or
//	                               not it has answered what queued in the gap
//	                               (default: once it has, then 2 s more)
//	FANOUT_RESTART_GAP_CGROUP=DIR  run fanout in this cgroup (v1 or v2,
//	                               e.g. with a CPU quota: a starved fanout)
//	FANOUT_RESTART_GAP_LOGS=DIR    keep fanout's and the holder's logs there
func TestRestartGapFigures(t *testing.T) {
	cycles, _ := strconv.Atoi(os.Getenv("FANOUT_RESTART_GAP"))
	if cycles <= 0 {
		t.Skip("a measurement: set FANOUT_RESTART_GAP=CYCLES to run it")
	}
	rate, _ := strconv.Atoi(os.Getenv("FANOUT_RESTART_GAP_RATE"))
	if rate <= 0 {
		rate = 200
	}
	delay := time.Second // the kubelet's restart of a native sidecar, as on the real node
	if d, err := time.ParseDuration(os.Getenv("FANOUT_RESTART_GAP_DELAY")); err == nil {
		delay = d // a crash-loop back-off, or a slow start
	}
	// By default each kill waits until the requests that queued in the
	// last gap are answered: restarts apart. With a spacing, it comes
	// that long after fanout is back, served or not.
	spacing, _ := time.ParseDuration(os.Getenv("FANOUT_RESTART_GAP_SPACING"))
	bin := buildFanout(t)
	for _, withHolder := range []bool{false, true} {
		name := map[bool]string{false: "without holder", true: "with fanout hold"}[withHolder]
		r := newRestartRig(t, bin, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			_, _ = io.Copy(io.Discard, req.Body)
			time.Sleep(5 * time.Millisecond)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"kind":"ConfigMap","apiVersion":"v1"}`)
		}))
		if withHolder {
			r.startHolder()
		}
		r.startFanout(withHolder)
		load := startLoad("http://"+r.listen, rate)
		var kills, deads, backs []time.Time
		back := time.Now()
		for range cycles {
			if spacing > 0 {
				time.Sleep(spacing)
			} else {
				// A fanout killed while it still serves the burst that
				// queued in its last gap breaks that burst too: on a
				// starved machine that can take seconds.
				load.waitServed(t, back)
				time.Sleep(2 * time.Second) // the rate steady again
			}
			kills = append(kills, time.Now())
			r.kill(r.fanout)
			deads = append(deads, time.Now())
			time.Sleep(delay)
			r.startFanout(withHolder)
			back = time.Now()
			backs = append(backs, back)
		}
		load.waitServed(t, back)
		time.Sleep(2 * time.Second)
		results := load.stop()
		report(t, name, results, kills, deads, backs)
		if dir := os.Getenv("FANOUT_RESTART_GAP_LOGS"); dir != "" {
			logs := fmt.Sprintf("fanout:\n%s\nfanout hold:\n%s", r.fanoutLog, r.holdLogs)
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".log")
			if err := os.WriteFile(file, []byte(logs), 0o644); err != nil {
				t.Error(err)
			}
			t.Logf("%s: fanout's and the holder's logs in %s", name, file)
		}
	}
}

type outcome struct {
	start   time.Time
	latency time.Duration
	method  string
	kind    string // ok, delayed, refused, reset/EOF, other
	err     string
	// The connection the request went out on: when its dial completed
	// (zero when reused from the pool), and its local address.
	dialed time.Time
	local  string
}

type loadGen struct {
	stopCh   chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	results  []outcome
	next     int
	inflight map[int]time.Time // the start of each request not yet answered
}

// waitServed waits until every request started before t has ended.
func (g *loadGen) waitServed(t *testing.T, before time.Time) {
	t.Helper()
	testkit.WaitFor(t, "the requests sent before "+before.Format("15:04:05.000")+" to end", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, start := range g.inflight {
			if start.Before(before) {
				return false
			}
		}
		return true
	})
}

// startLoad sends rate requests a second to base, each in its own
// goroutine, as a controller's workers would.
func startLoad(base string, rate int) *loadGen {
	tr := &http.Transport{ // client-go's utilnet.SetTransportDefaults and rest defaults
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
	}
	c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	g := &loadGen{stopCh: make(chan struct{}), inflight: map[int]time.Time{}}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-g.stopCh:
				return
			case <-tick.C:
			}
			method := http.MethodGet
			if i%2 == 1 {
				method = http.MethodPost
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.one(c, base, method)
			}()
		}
	}()
	return g
}

func (g *loadGen) one(c *http.Client, base, method string) {
	var body io.Reader
	if method == http.MethodPost {
		body = bytes.NewReader([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"generateName":"x"}}`))
	}
	req, _ := http.NewRequest(method, base+"/api/v1/namespaces/default/configmaps", body)
	req.Header.Set("Content-Type", "application/json")
	o := outcome{start: time.Now(), method: method}
	g.mu.Lock()
	id := g.next
	g.next++
	g.inflight[id] = o.start
	g.mu.Unlock()
	var mu sync.Mutex // httptrace hooks may run on the transport's goroutines
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		ConnectDone: func(_, _ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				o.dialed = time.Now()
			}
		},
		GotConn: func(ci httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			o.local = ci.Conn.LocalAddr().String()
		},
	}))
	resp, err := c.Do(req)
	mu.Lock()
	defer mu.Unlock()
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
	}
	o.latency = time.Since(o.start)
	switch {
	case err == nil && o.latency > 100*time.Millisecond:
		o.kind = "delayed"
	case err == nil:
		o.kind = "ok"
	case errors.Is(err, syscall.ECONNREFUSED):
		o.kind = "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(err.Error(), "server closed idle connection"), strings.Contains(err.Error(), "broken pipe"):
		o.kind = "reset/EOF"
	default:
		o.kind = "other"
	}
	if err != nil {
		o.err = err.Error()
	}
	g.mu.Lock()
	g.results = append(g.results, o)
	delete(g.inflight, id)
	g.mu.Unlock()
}

func (g *loadGen) stop() []outcome {
	close(g.stopCh)
	g.wg.Wait()
	return g.results
}

func report(t *testing.T, name string, results []outcome, kills, deads, backs []time.Time) {
	t.Helper()
	count := map[string]int{}
	var maxDelay time.Duration
	var clientGoRetries int
	others := map[string]int{}
	for _, o := range results {
		count[o.kind]++
		count[o.kind+" "+o.method]++
		// client-go resends a GET that broke, and any request answered
		// 429 with Retry-After (fanout's --max-inflight answer).
		if o.kind == "reset/EOF" && o.method == http.MethodGet || o.err == "status 429" {
			clientGoRetries++
		}
		if o.kind == "other" {
			others[o.err]++
		}
		if o.kind == "delayed" {
			maxDelay = max(maxDelay, o.latency)
		}
	}
	// Per kill: the last refusal after it, and the first request started
	// after it that succeeded.
	var refusalWindows, firstOKs []time.Duration
	for i, k := range kills {
		var lastRefused, firstOK time.Time
		end := backs[i].Add(time.Second) // before the next kill's requests
		for _, o := range results {
			if o.start.Before(k) || !o.start.Before(end) {
				continue
			}
			if o.kind == "refused" && o.start.After(lastRefused) {
				lastRefused = o.start
			}
			if (o.kind == "ok" || o.kind == "delayed") && (firstOK.IsZero() || o.start.Before(firstOK)) {
				firstOK = o.start
			}
		}
		if !lastRefused.IsZero() {
			refusalWindows = append(refusalWindows, lastRefused.Sub(k))
		}
		if !firstOK.IsZero() {
			firstOKs = append(firstOKs, firstOK.Add(0).Sub(k))
		}
	}
	var restarts []time.Duration
	for i := range kills {
		restarts = append(restarts, backs[i].Sub(kills[i]))
	}
	// Delayed answers: how long after fanout served again each came.
	var delayed, afterBack []time.Duration
	for _, o := range results {
		if o.kind != "delayed" {
			continue
		}
		delayed = append(delayed, o.latency)
		end := o.start.Add(o.latency)
		best := time.Duration(-1)
		for _, b := range backs {
			if d := end.Sub(b); d >= 0 && (best < 0 || d < best) {
				best = d
			}
		}
		if best >= 0 {
			afterBack = append(afterBack, best)
		}
	}
	// Broken requests: when they started and ended, relative to the kill
	// before them, and what they said.
	var brokeStart, brokeEnd []time.Duration
	msgs := map[string]int{}
	for _, o := range results {
		if o.kind != "reset/EOF" {
			continue
		}
		msgs[o.err[max(0, len(o.err)-60):]]++
		for i := len(kills) - 1; i >= 0; i-- {
			if !o.start.Before(kills[i].Add(-time.Second)) {
				brokeStart = append(brokeStart, o.start.Sub(kills[i]))
				brokeEnd = append(brokeEnd, o.start.Add(o.latency).Sub(kills[i]))
				break
			}
		}
	}
	t.Logf("%s: broken requests started %s and ended %s after the kill; errors %v", name, spread(brokeStart), spread(brokeEnd), msgs)
	brokenWhen(t, name, results, kills, deads, backs)
	t.Logf("%s: delayed answers' latency %s; they came after fanout served again by %s", name, spread(delayed), spread(afterBack))
	failed := count["refused"] + count["reset/EOF"] + count["other"]
	cgFailed := failed - clientGoRetries
	n := len(kills)
	t.Logf("%s: %d SIGKILLs, %d requests: ok %d, delayed (>100ms) %d (max %v), refused %d (GET %d, POST %d), reset/EOF %d (GET %d, POST %d), other %d %v",
		name, n, len(results), count["ok"], count["delayed"], maxDelay.Round(time.Millisecond),
		count["refused"], count["refused GET"], count["refused POST"],
		count["reset/EOF"], count["reset/EOF GET"], count["reset/EOF POST"], count["other"], others)
	t.Logf("%s: failed %d = %.1f per restart; failed even with client-go's retries (of broken GETs, and of 429s): %d = %.1f per restart",
		name, failed, float64(failed)/float64(n), cgFailed, float64(cgFailed)/float64(n))
	t.Logf("%s: SIGKILL to fanout serving again (delay + start): %v; SIGKILL to the last refused request's start: %v; to the first successful request's start: %v",
		name, spread(restarts), spread(refusalWindows), spread(firstOKs))
}

// brokenWhen sorts the broken requests (reset/EOF) by what broke them.
// A request that ended as a fanout was being killed (between the SIGKILL
// and the process's end, plus the client's own lag) was in flight on a
// connection that fanout had accepted: it died with the process. Of those,
// some had queued in the previous restart's gap and were still being
// served. Any other broken request broke while nothing was killed: with
// the holder, one that waited in the backlog and broke anyway.
func brokenWhen(t *testing.T, name string, results []outcome, kills, deads, backs []time.Time) {
	t.Helper()
	const lag = 250 * time.Millisecond // the client noticing the broken connection
	dialed := map[string]time.Time{}
	for _, o := range results {
		if !o.dialed.IsZero() {
			dialed[o.local] = o.dialed
		}
	}
	var atKill, queued, queuedDialed, elsewhere int
	var others []string
	for _, o := range results {
		if o.kind != "reset/EOF" {
			continue
		}
		end := o.start.Add(o.latency)
		j := -1
		for i := range kills {
			if !end.Before(kills[i]) && !end.After(deads[i].Add(lag)) {
				j = i
			}
		}
		if j < 0 {
			elsewhere++
			if len(others) < 5 {
				d := dialed[o.local]
				others = append(others, fmt.Sprintf("%s %s started %s, dialled %s, ended %s: %s", o.method, o.local,
					o.start.Format("15:04:05.000"), d.Format("15:04:05.000"), end.Format("15:04:05.000"), o.err))
			}
			continue
		}
		atKill++
		// Queued in the previous gap: sent after the previous kill,
		// before fanout was back from it.
		if j > 0 && o.start.After(kills[j-1]) && o.start.Before(backs[j-1]) {
			queued++
			if d, ok := dialed[o.local]; ok && d.After(kills[j-1]) {
				queuedDialed++
			}
		}
	}
	t.Logf("%s: broken requests: %d ended as a fanout was killed (in flight on a connection it had accepted; %d of them sent in the previous restart's gap, %d of those on a connection dialled then, i.e. queued in the backlog and still being served), %d ended at another time %v",
		name, atKill, queued, queuedDialed, elsewhere, others)
}

// spread is min/median/max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("min %v / median %v / p90 %v / max %v", r(ds[0]), r(ds[len(ds)/2]), r(ds[len(ds)*9/10]), r(ds[len(ds)-1]))
}
