package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// The injected sidecar's memory limit (cmd/fanout-injector) and the Go
// memory limit --memory-limit auto sets under it (90%).
const (
	injectedLimit = 256 << 20
	goLimit       = injectedLimit * 9 / 10
	// autoConnections is --max-connections auto under goLimit:
	// goLimit/4 over 32 KiB (components/sidecar/memory.go).
	autoConnections = goLimit / 4 / (32 << 10)
	// autoReplay is --replay-budget auto under goLimit: goLimit/8.
	autoReplay = goLimit / 8
	// autoHeaders is --header-budget auto under goLimit: goLimit/16.
	autoHeaders = goLimit / 16
	// autoAnswerWindows is --answer-window-budget auto under goLimit:
	// goLimit/128 (components/transport).
	autoAnswerWindows = goLimit / 128
)

// The header push of TestSumOfMemoryBounds: bigHeaders connections each
// send bigHeader bytes of a request header (--max-header-bytes, 1 MiB,
// less 8 KiB) and stall before its end.
const (
	bigHeaders = 64
	bigHeader  = 1<<20 - 8<<10
)

// writeBigHeader sends c a request header of size bytes, in 1 KiB lines,
// and not its end.
func writeBigHeader(c net.Conn, size int) error {
	w := bufio.NewWriter(c)
	w.WriteString("GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n")
	line := "X-Filler: " + strings.Repeat("f", 1024-12) + "\r\n"
	for range size / len(line) {
		w.WriteString(line)
	}
	return w.Flush()
}

// pushHeaders opens bigHeaders connections that each send a header of
// bigHeader bytes and stall, appending them to conns, and returns once
// fanout read every byte sent to the connections it kept (/proc/net/tcp)
// and closed the others. With the header budget on, those past it get 431
// and are closed; the budget must then be full and not exceeded.
func pushHeaders(t *testing.T, f *footprintFanout, addr string, conns *[]net.Conn) {
	t.Helper()
	refusedBefore := metricValue(t, f.admin, "fanout_header_budget_exhausted_total")
	connsBefore := metricValue(t, f.admin, "fanout_downstream_connections")
	t.Logf("header budget in use before the push: %.1f MiB (h2c connections, --max-header-bytes each, and the headers of the requests on them)",
		metricValue(t, f.admin, "fanout_header_budget_used_bytes")/(1<<20))
	var writes sync.WaitGroup
	start := len(*conns)
	for range bigHeaders {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		*conns = append(*conns, c)
		_ = c.SetWriteDeadline(time.Now().Add(60 * time.Second))
		// A write to a connection refused with 431 fails when fanout
		// closes it; one to a connection kept ends once fanout read it.
		writes.Go(func() { _ = writeBigHeader(c, bigHeader) })
	}
	writes.Wait()
	waitRead(t, (*conns)[start:], 30*time.Second)
	refused := metricValue(t, f.admin, "fanout_header_budget_exhausted_total") - refusedBefore
	// A connection refused lingers half a second before fanout closes it
	// (h1server's closeWriteAndWait): the next push counts the open ones.
	waitConnections(t, f, connsBefore+bigHeaders-refused)
	limit := metricValue(t, f.admin, "fanout_header_budget_limit_bytes")
	used := metricValue(t, f.admin, "fanout_header_budget_used_bytes")
	t.Logf("header push: %v of %d connections refused with 431; header budget in use %.1f of %.1f MiB", refused, bigHeaders, used/(1<<20), limit/(1<<20))
	if limit != autoHeaders {
		t.Errorf("fanout_header_budget_limit_bytes = %v, want %d (auto under a %d-byte Go memory limit)", limit, autoHeaders, goLimit)
	}
	if used > limit || used < limit-bigHeader-8<<10 {
		t.Errorf("header budget in use %v after the push, want it full (within one header of its %v bytes) and not over", used, limit)
	}
}

// procMemory is the process's resident memory now and at its peak
// (VmRSS, VmHWM of /proc/PID/status).
func procMemory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", k, v, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	return rss, peak
}

// metricValue is the value of the one series named series in /metrics.
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, admin), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

// TestSumOfMemoryBounds runs the fanout binary with the memory limit of
// the injected sidecar (--memory-limit as auto sets it under 256Mi, so
// that --max-connections and --replay-budget are sized to it) in front of
// a TLS HTTP/2 apiserver stand-in, and a hostile local client pushes the
// bounds docs/security.md sums up, all at once:
//
//   - 40 POSTs of 1 MiB bodies held at the apiserver after it read them
//     (the replay budget full, the rest streamed);
//   - short requests up to --max-inflight, over h2c, whose large answers
//     the client does not read (1 KiB stream windows): fanout's copies
//     block with their buffers held, the answer window budget full;
//   - watches up to --max-long-running, over h2c, each past its first
//     event;
//   - the cost table and its User-Agent cache filled with distinct keys
//     and 1,000-byte User-Agents;
//   - 64 connections that each send 1 MiB less 8 KiB of a request header
//     and stall (pushHeaders): the header budget full, the rest answered
//     431;
//   - then connections that begin a request header and stall, up to
//     --max-connections: fanout must count exactly its limit open, hold
//     at most the 32 KiB per connection that auto counts, and refuse
//     one more at accept.
//
// The process's peak resident memory (VmHWM, what a cgroup limit counts
// besides the page cache) must stay under 256Mi. It logs each term's
// share: heap (live, after GC), stacks and resident memory after each
// push.
func TestSumOfMemoryBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections and streams")
	}
	const (
		bodies      = 40
		bodySize    = 1 << 20
		maxInflight = 1000 // --max-inflight's default
		maxLong     = 4096 // --max-long-running's default
		// The short requests' answers: more than fanout, the kernel and
		// the client's 1 KiB windows can hold between them, and at least
		// unreadStalled bytes of each taken from the apiserver before the
		// push is measured: past the client's window, fanout's h2c write
		// buffer and a copy buffer.
		unreadAnswer  = 16 << 20
		unreadStalled = 8 << 10
		// unreadPerRequest bounds the heap each such request holds past
		// the answer budget.
		unreadPerRequest = 20 << 10
	)
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
	release := make(chan struct{})
	// answers the apiserver got unreadStalled bytes of through
	var unreadSent sync.WaitGroup
	bodyRead := make(chan struct{}, bodies)
	upstream := tlsUpstream(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("watch") == "true":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"1"}}}`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		case strings.HasSuffix(r.URL.Path, "/unread"):
			// A large LIST, sent as fast as fanout takes it.
			w.Header().Set("Content-Length", strconv.Itoa(unreadAnswer))
			chunk := make([]byte, 4<<10)
			for sent := 0; sent < unreadAnswer; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				if sent+len(chunk) >= unreadStalled && sent < unreadStalled {
					unreadSent.Done()
				}
			}
			return
		case strings.HasSuffix(r.URL.Path, "/held"):
			_, _ = io.Copy(io.Discard, r.Body)
			bodyRead <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintln(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}`)
	}), testkit.WithHTTP2(&http.HTTP2Config{MaxConcurrentStreams: 1000}))
	// Headers begun are held to the end, as every other push: a hostile
	// client reconnects each --read-header-timeout (10 s) anyway.
	f := startFootprintFanout(t, bin, ca, upstream.URL, "--memory-limit", strconv.Itoa(goLimit), "--read-header-timeout", "5m")
	defer close(release)

	if got := metricValue(t, f.admin, "fanout_replay_budget_limit_bytes"); got != autoReplay {
		t.Fatalf("fanout_replay_budget_limit_bytes = %v, want %d (auto under a %d-byte Go memory limit)", got, autoReplay, goLimit)
	}
	if got := metricValue(t, f.admin, "fanout_answer_window_budget_limit_bytes"); got != autoAnswerWindows {
		t.Fatalf("fanout_answer_window_budget_limit_bytes = %v, want %d (auto under a %d-byte Go memory limit)", got, autoAnswerWindows, goLimit)
	}
	var terms []string
	last, _ := procMemory(t, f.pid)
	lastStats := f.stats(t)
	term := func(name string) {
		s := f.stats(t)
		rss, peak := procMemory(t, f.pid)
		terms = append(terms, fmt.Sprintf("%-58s heap %+7.1f MiB, stacks %+6.1f MiB, RSS %+7.1f MiB (now %6.1f, peak %6.1f MiB)",
			name, float64(int64(s.heapAlloc)-int64(lastStats.heapAlloc))/(1<<20), float64(int64(s.stackInuse)-int64(lastStats.stackInuse))/(1<<20),
			float64(rss-last)/(1<<20), float64(rss)/(1<<20), float64(peak)/(1<<20)))
		last, lastStats = rss, s
	}
	term("fanout started")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h1 := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: bodies}}
	// At most 8 h2c connections, for 5,056 streams at 1000 each: each
	// holds --max-header-bytes of the header budget, and a transport that
	// dials more at once under load would find the later ones closed.
	h2c := &http.Client{Transport: &http.Transport{Protocols: new(http.Protocols), MaxConnsPerHost: 8}}
	h2c.Transport.(*http.Transport).Protocols.SetUnencryptedHTTP2(true)
	defer h1.CloseIdleConnections()
	defer h2c.CloseIdleConnections()
	var clients sync.WaitGroup
	defer clients.Wait()
	defer cancel()
	do := func(c *http.Client, method, path string, body io.Reader, size int64, ua string) {
		req, _ := http.NewRequestWithContext(ctx, method, f.server+path, body)
		req.ContentLength = size
		if ua != "" {
			req.Header.Set("User-Agent", ua)
		}
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	// The cost table and the User-Agent cache, filled first: their keys
	// stay.
	for i := range 1200 {
		ua := fmt.Sprintf("hostile-%04d/%s", i, strings.Repeat("u", 1000-18))
		do(h1, http.MethodGet, fmt.Sprintf("/apis/g%d.example.com/v1/namespaces/default/things/a", i), nil, 0, ua)
	}
	term("cost table and User-Agent cache filled (1,200 keys)")

	for range bodies {
		clients.Go(func() {
			do(h1, http.MethodPost, "/api/v1/namespaces/default/configmaps/held", io.LimitReader(zeros{}, bodySize), bodySize, "")
		})
	}
	for range bodies {
		select {
		case <-bodyRead:
		case <-time.After(60 * time.Second):
			t.Fatal("the bodies did not reach the apiserver within 60s")
		}
	}
	if used := metricValue(t, f.admin, "fanout_replay_budget_used_bytes"); used > autoReplay {
		t.Errorf("replay budget in use %v, over its %d bytes", used, autoReplay)
	}
	term(fmt.Sprintf("%d POSTs of 1 MiB held (replay budget %.1f MiB)", bodies, float64(autoReplay)/(1<<20)))

	// The short requests: answers the client does not read. Its h2c
	// streams grant fanout 1 KiB each, so fanout's copy of each answer
	// blocks with its buffers held: the copy buffer (32 KiB while the
	// answer budget lends them, 2 KiB past it), the upstream stream's
	// window, net/http's write buffer of the stream.
	unread := &http.Client{Transport: &http.Transport{Protocols: new(http.Protocols), MaxConnsPerHost: 2,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 10, MaxReceiveBufferPerConnection: 4<<20 - 1}}}
	unread.Transport.(*http.Transport).Protocols.SetUnencryptedHTTP2(true)
	defer unread.CloseIdleConnections()
	shorts := maxInflight - bodies
	unreadSent.Add(shorts)
	var answers []*http.Response
	var answersMu sync.Mutex
	defer func() {
		for _, resp := range answers {
			resp.Body.Close()
		}
	}()
	for i := range shorts {
		clients.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/namespaces/n%d/configmaps/unread", f.server, i), nil)
			if resp, err := unread.Do(req); err == nil {
				answersMu.Lock()
				answers = append(answers, resp)
				answersMu.Unlock()
			}
		})
	}
	waited := make(chan struct{})
	go func() { unreadSent.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the apiserver did not get %d KiB of each of the %d answers through within 60s", unreadStalled>>10, shorts)
	}
	answerUsed := metricValue(t, f.admin, "fanout_answer_window_budget_used_bytes")
	if answerUsed > autoAnswerWindows {
		t.Errorf("answer window budget in use %v, over its %d bytes", answerUsed, autoAnswerWindows)
	}
	beforeUnread := lastStats
	term(fmt.Sprintf("%d short requests whose answers the client does not read, over h2c (answer budget %.1f of %.1f MiB in use)", shorts, answerUsed/(1<<20), float64(autoAnswerWindows)/(1<<20)))
	// Each holds its request and stream state, net/http's 4 KiB write
	// buffer, a 2 KiB window and a 2 KiB copy buffer past the budget:
	// 15 KiB measured. 32 KiB copy buffers for all of them, as before
	// the budget lent them, grew the heap by 44.1 MiB.
	if grew, bound := int64(lastStats.heapAlloc)-int64(beforeUnread.heapAlloc), int64(shorts*unreadPerRequest+autoAnswerWindows); grew > bound {
		t.Errorf("the unread answers grew the heap by %.1f MiB, over %d × %d KiB and the %.1f MiB answer budget (%.1f MiB)",
			float64(grew)/(1<<20), shorts, unreadPerRequest>>10, float64(autoAnswerWindows)/(1<<20), float64(bound)/(1<<20))
	}

	stop := openIdleWatches(t, h2c, f.server, maxLong)
	defer stop()
	term(fmt.Sprintf("%d watches open, over h2c", maxLong))

	addr := strings.TrimPrefix(f.server, "http://")
	var idle, bigs []net.Conn
	defer func() {
		for _, c := range append(idle, bigs...) {
			c.Close()
		}
	}()
	beforeHeaders := lastStats
	pushHeaders(t, f, addr, &bigs)
	term(fmt.Sprintf("%d connections sending a %d KiB header and stalling (header budget %.1f MiB)", bigHeaders, bigHeader>>10, float64(autoHeaders)/(1<<20)))
	if grew := int64(lastStats.heapAlloc) - int64(beforeHeaders.heapAlloc); grew > autoHeaders*11/10 {
		t.Errorf("the header push grew the heap by %.1f MiB, over the %.1f MiB header budget (and a tenth)", float64(grew)/(1<<20), float64(autoHeaders)/(1<<20))
	}

	open := int(metricValue(t, f.admin, "fanout_downstream_connections"))
	for range autoConnections - open {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		// A request header begun and never finished: the server reads it
		// (a goroutine, its buffers) until --read-header-timeout.
		if _, err := io.WriteString(c, "GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\nX-Hold: "); err != nil {
			t.Fatal(err)
		}
	}
	// The last one is accepted when fanout counts them all.
	waitConnections(t, f, autoConnections)
	before := lastStats
	term(fmt.Sprintf("%d connections with a header begun (to --max-connections auto, %d)", len(idle), autoConnections))
	perConn := float64(lastStats.heapAlloc+lastStats.stackInuse-before.heapAlloc-before.stackInuse) / float64(len(idle))
	terms = append(terms, fmt.Sprintf("heap and stacks per such connection: %.1f KiB", perConn/1024))
	if perConn > 32<<10 {
		t.Errorf("a connection with a header begun holds %.1f KiB, over the 32 KiB --max-connections auto counts per connection (components/sidecar/memory.go)", perConn/1024)
	}

	// One more is refused at accept.
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(extra).ReadByte(); err != io.EOF {
		t.Errorf("a connection over --max-connections: read %v, want io.EOF (closed at accept)", err)
	}
	extra.Close()

	rss, peak := procMemory(t, f.pid)
	t.Logf("the hostile client's pushes, one after the other, all held at the end:\n%s", strings.Join(terms, "\n"))
	t.Logf("fanout: resident %.1f MiB, peak %.1f MiB; limit %d MiB", float64(rss)/(1<<20), float64(peak)/(1<<20), injectedLimit>>20)
	if peak >= injectedLimit {
		t.Errorf("fanout's peak resident memory %.1f MiB, at or over the injected sidecar's %d MiB limit", float64(peak)/(1<<20), injectedLimit>>20)
	}
}

// zeros is an endless body that holds no memory of its own.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestHeaderInProgressCost measures what one request header being read
// costs, up to --max-header-bytes (1 MiB, kube-apiserver's), with the
// header budget off: the budget counts header bytes read, and this is
// what a byte read costs. 32 connections each send a header of 1 MiB
// less 8 KiB, in 1 KiB lines, and stall; once the kernel's queues of
// every one are empty (/proc/net/tcp: fanout has read all), the live
// heap and stacks per connection must stay under twice what was sent
// (docs/security.md gives the figure).
func TestHeaderInProgressCost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	const (
		conns = 32
		sent  = 1<<20 - 8<<10
	)
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("needs /proc/net/tcp to know fanout has read the headers")
	}
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
	upstream := tlsUpstream(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	f := startFootprintFanout(t, bin, ca, upstream.URL, "--memory-limit", strconv.Itoa(goLimit), "--header-budget", "off")
	addr := strings.TrimPrefix(f.server, "http://")
	before := f.stats(t)
	var cs []net.Conn
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		if err := writeBigHeader(c, sent); err != nil {
			t.Fatal(err)
		}
	}
	waitRead(t, cs, 5*time.Second)
	after := f.stats(t)
	per := float64(after.heapAlloc+after.stackInuse-before.heapAlloc-before.stackInuse) / conns
	rss, _ := procMemory(t, f.pid)
	t.Logf("%d connections with %d KiB of header each: %.1f KiB of heap and stacks per connection; fanout resident %.1f MiB",
		conns, sent>>10, per/1024, float64(rss)/(1<<20))
	if per > 2*sent {
		t.Errorf("a header of %d KiB being read holds %.1f KiB, over twice its size", sent>>10, per/1024)
	}
}

// waitRead waits until the kernel holds nothing sent on conns (tcpQueued):
// fanout read all of it, or closed the connection.
func waitRead(t *testing.T, conns []net.Conn, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; {
		var queued int64
		for _, c := range conns {
			queued += tcpQueued(t, c)
		}
		if queued == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still in the kernel's queues after %v: fanout is not reading the headers", queued, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitConnections waits until fanout counts want client connections open.
func waitConnections(t *testing.T, f *footprintFanout, want float64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		n := metricValue(t, f.admin, "fanout_downstream_connections")
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fanout_downstream_connections = %v, want %v", n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tcpQueued is what the kernel holds of c in both directions: c's send
// queue and the receive queue of its peer, from /proc/net/tcp (both ends
// on loopback).
func tcpQueued(t *testing.T, c net.Conn) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	port := func(a net.Addr) string { return fmt.Sprintf(":%04X", a.(*net.TCPAddr).Port) }
	local, remote := port(c.LocalAddr()), port(c.RemoteAddr())
	var q int64
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line) // sl local_address rem_address st tx_queue:rx_queue ...
		if len(f) < 5 {
			continue
		}
		ours := strings.HasSuffix(f[1], local) && strings.HasSuffix(f[2], remote)
		peer := strings.HasSuffix(f[1], remote) && strings.HasSuffix(f[2], local)
		if !ours && !peer {
			continue
		}
		// Only what c sent: a 431 fanout wrote back waits in c's own
		// receive queue until c reads it, and is not fanout's to read.
		tx, rx, _ := strings.Cut(f[4], ":")
		if ours {
			n, _ := strconv.ParseInt(tx, 16, 64)
			q += n
		} else {
			n, _ := strconv.ParseInt(rx, 16, 64)
			q += n
		}
	}
	return q
}
