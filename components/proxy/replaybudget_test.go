package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// zeros is an endless body that holds no memory of its own.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// waitReplayUsed waits until the budget in use is want: a request's budget
// is given back when its handler returns, just after the client has its
// answer.
func waitReplayUsed(t *testing.T, h *Handler, want int64) {
	t.Helper()
	for deadline := time.Now().Add(testkit.WaitLimit); h.replay.Used() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("replay budget in use: %d bytes, want %d", h.replay.Used(), want)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// TestReplayBudgetBoundsBodiesInSum is the attack of the memory review:
// 40 requests each send a 1 MiB body (the most one request keeps for
// retries) and wait for the apiserver, which has read them all. Without a
// budget for all bodies together fanout held 40 MiB; with an 8 MiB budget
// the bodies beyond it stream through without a copy, the live heap grows
// by less than the budget plus 8 MiB, and every request is still answered.
// The budget comes back, to the byte, once the requests end.
func TestReplayBudgetBoundsBodiesInSum(t *testing.T) {
	const (
		requests = 40
		body     = 1 << 20
		budget   = 8 << 20
	)
	arrived := make(chan struct{}, requests)
	release := make(chan struct{})
	p := proxytest.NewPicker("a:6443")
	u := proxytest.NewUpstream()
	u.Set("a:6443", testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil || n != body {
			return nil, fmt.Errorf("apiserver read %d bytes of the body (%v), want %d", n, err, body)
		}
		arrived <- struct{}{}
		<-release
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}, nil
	}))
	m, _ := NewMetrics(nil)
	_, h, base := startProxy(t, Config{ReplayBudget: budget}, p, u, m)
	c := testkit.NewClient(t, false)

	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for range requests {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/namespaces/ns/configmaps", io.LimitReader(zeros{}, body))
			req.ContentLength = body
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(b) != "ok" {
				errs <- fmt.Errorf("answer %d %q, want 200 ok", resp.StatusCode, b)
			}
		})
	}
	for range requests {
		testkit.Wait(t, arrived, "every body at the apiserver")
	}
	grown := int64(heap()) - int64(before)
	used := h.replay.Used()
	streamed := testutil.ToFloat64(m.replayExhausted)
	t.Logf("%d requests of %d KiB held at the apiserver: heap +%.1f MiB, budget in use %.1f MiB of %d MiB, %v bodies streamed without replay",
		requests, body>>10, float64(grown)/(1<<20), float64(used)/(1<<20), budget>>20, streamed)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if used > budget {
		t.Errorf("bodies held for replay: %d bytes, over the %d-byte budget", used, budget)
	}
	if grown > budget+8<<20 {
		t.Errorf("heap grew by %.1f MiB with %d 1 MiB bodies in flight, want under the %d MiB budget + 8 MiB", float64(grown)/(1<<20), requests, budget>>20)
	}
	if min := float64(requests - budget/body); streamed < min {
		t.Errorf("fanout_replay_budget_exhausted_total = %v, want at least %v: only %d bodies of 1 MiB fit in the budget", streamed, min, budget/body)
	}
	if got := testutil.ToFloat64(m.replayLimit); got != budget {
		t.Errorf("fanout_replay_budget_limit_bytes = %v, want %d", got, budget)
	}
	waitReplayUsed(t, h, 0)
	if got := testutil.ToFloat64(m.replayUsed); got != 0 {
		t.Errorf("fanout_replay_budget_used_bytes = %v after every request ended, want 0", got)
	}
}

// TestReplayBudgetSpentNeverResends: a body that streamed because the
// budget was spent must never be sent again, even when the apiserver never
// processed it (which would make a replayable request move). The same
// request with the budget free again is moved, so the test can tell.
func TestReplayBudgetSpentNeverResends(t *testing.T) {
	const (
		dead   = "192.0.2.1:6443" // sorts first: the fake picker tries it first
		good   = "192.0.2.2:6443"
		budget = 16 << 10
	)
	holding := make(chan struct{}, 1)
	unhold := make(chan struct{})
	var mu sync.Mutex
	goodHits := map[string]int{}
	hits := func(body string) int { // how often body reached good
		mu.Lock()
		defer mu.Unlock()
		return goodHits[body]
	}
	answer := func(r *http.Request) *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}
	}
	p := proxytest.NewPicker(dead, good)
	u := proxytest.NewUpstream()
	u.Set(dead, testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/hold" {
			_, _ = io.Copy(io.Discard, r.Body)
			holding <- struct{}{}
			<-unhold
			return answer(r), nil
		}
		// Reads the body, as an HTTP/2 transport may have sent it, and
		// reports that the apiserver never got the request.
		_, _ = io.Copy(io.Discard, r.Body)
		return nil, &transport.UnprocessedError{Endpoint: dead, Err: errors.New("stream refused")}
	}))
	u.Set(good, testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		goodHits[string(b)]++
		mu.Unlock()
		return answer(r), nil
	}))
	m, _ := NewMetrics(nil)
	_, h, base := startProxy(t, Config{ReplayBudget: budget}, p, u, m)
	c := testkit.NewClient(t, false)
	post := func(path, body string) int {
		resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	// One request holds the whole budget at the apiserver.
	held := make(chan int, 1)
	go func() { held <- post("/hold", strings.Repeat("h", budget)) }()
	testkit.Wait(t, holding, "the request holding the budget")
	if got := h.replay.Used(); got != budget {
		t.Fatalf("the holding request took %d bytes of budget, want %d", got, budget)
	}
	if code := post("/api/v1/namespaces/ns/configmaps", "spent"); code != http.StatusBadGateway {
		t.Errorf("a request whose body streamed, refused by the apiserver unprocessed: %d, want 502 (never sent again)", code)
	}
	if n := hits("spent"); n != 0 {
		t.Errorf("a body that was not kept for replay reached the other apiserver %d times, want 0", n)
	}
	if got := testutil.ToFloat64(m.replayExhausted); got != 1 {
		t.Errorf("fanout_replay_budget_exhausted_total = %v, want 1", got)
	}

	close(unhold)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the holding request: %d, want 200", code)
	}
	waitReplayUsed(t, h, 0)
	if code := post("/api/v1/namespaces/ns/configmaps", "free"); code != http.StatusOK {
		t.Errorf("the same request with the budget free: %d, want 200 (moved to the other apiserver)", code)
	}
	if n := hits("free"); n != 1 {
		t.Errorf("the replayable body reached the other apiserver %d times, want 1", n)
	}
}

// TestReplayBudgetGivenBackOnEveryEnd ends requests with a buffered body
// every way one can end (an answer, an upstream error, the client going
// away while the apiserver thinks, the client going away mid-answer, which
// makes the reverse proxy panic with http.ErrAbortHandler; the library's
// RoundTripper with its answer read or closed, or failing), and checks the
// budget comes back to 0 each time, never below. A bodiless watch takes
// none while it is open.
func TestReplayBudgetGivenBackOnEveryEnd(t *testing.T) {
	const addr = "a:6443"
	streaming := make(chan struct{}, 1)
	thinking := make(chan struct{}, 1)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		switch r.URL.Query().Get("end") {
		case "error":
			return nil, errors.New("stream reset after the request was sent")
		case "think":
			thinking <- struct{}{}
			<-r.Context().Done()
			return nil, r.Context().Err()
		case "stream":
			pr, pw := io.Pipe()
			go func() {
				_, _ = pw.Write([]byte("first"))
				streaming <- struct{}{}
				<-r.Context().Done()
				pw.CloseWithError(r.Context().Err())
			}()
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: pr, ContentLength: -1, Request: r}, nil
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}, nil
	}))
	m, _ := NewMetrics(nil)
	_, h, base := startProxy(t, Config{}, p, u, m)
	c := testkit.NewClient(t, false)
	const body = "apiVersion: v1\nkind: ConfigMap\n"
	path := "/api/v1/namespaces/ns/configmaps?end="

	for _, end := range []string{"answer", "error"} {
		resp, err := c.Post(base+path+end, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		waitReplayUsed(t, h, 0)
	}
	for _, end := range []string{"think", "stream"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path+end, strings.NewReader(body))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		if end == "think" {
			testkit.Wait(t, thinking, "the apiserver holding the request")
		} else {
			testkit.Wait(t, streaming, "the answer streaming")
		}
		if got := h.replay.Used(); got < int64(len(body)) {
			t.Errorf("end=%s: %d bytes of budget in use while the request is open, want at least its %d-byte body", end, got, len(body))
		}
		cancel()
		<-done
		waitReplayUsed(t, h, 0)
	}

	rt := h.RoundTripper()
	for _, end := range []string{"answer", "error"} {
		req, _ := http.NewRequest(http.MethodPost, "https://ignored"+path+end, strings.NewReader(body))
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if end == "answer" && h.replay.Used() == 0 {
			t.Error("the library's request gave its budget back before its answer was read")
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if h.replay.Used() != 0 {
			t.Errorf("library, end=%s: %d bytes of budget in use once the answer was read, want 0", end, h.replay.Used())
		}
		resp.Body.Close()
		if h.replay.Used() != 0 {
			t.Errorf("library, end=%s: budget in use after Close: %d, want 0", end, h.replay.Used())
		}
	}

	// A watch has no body: it takes no budget while it waits for its
	// answer.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/namespaces/ns/configmaps?watch=true&end=think", nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testkit.Wait(t, thinking, "the apiserver holding the watch")
	if got := h.replay.Used(); got != 0 {
		t.Errorf("an open watch holds %d bytes of replay budget, want 0", got)
	}
	cancel()
	<-done
}

// TestAutoReplayBudget: a Config that leaves ReplayBudget at 0 gets an
// eighth of the process's Go memory limit when New runs, within its
// bounds, and the fixed default without a limit.
func TestAutoReplayBudget(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, tc := range []struct {
		limit, want int64
	}{
		{math.MaxInt64, DefaultReplayBudget},
		{256 << 20 * 9 / 10, 256 << 20 * 9 / 10 / 8},
		{16 << 20, MinAutoReplayBudget},
		{4 << 30, DefaultReplayBudget},
	} {
		debug.SetMemoryLimit(tc.limit)
		h := New(Config{}, proxytest.NewPicker(), proxytest.NewUpstream(), nil)
		if h.replay.Limit() != tc.want {
			t.Errorf("Go memory limit %d: replay budget %d, want %d", tc.limit, h.replay.Limit(), tc.want)
		}
		if got := New(Config{ReplayBudget: 3 << 20}, proxytest.NewPicker(), proxytest.NewUpstream(), nil).replay.Limit(); got != 3<<20 {
			t.Errorf("Go memory limit %d: an explicit budget became %d", tc.limit, got)
		}
	}
}
