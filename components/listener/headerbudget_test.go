package listener

import (
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestHeaderBudgetOverH2C: over h2c, the connection holds
// --max-header-bytes of the header budget for its life and each request
// its header's HTTP/2 size while it runs; a request whose header does not
// fit gets 431 and never reaches the apiserver, and everything comes back
// when the requests end and the connection closes. Waits are on the
// budget's gauge, never on time. The connection's share is taken where
// internal/h1server hands the connection over, so this runs with it
// alone: with --h1-server std an h2c connection holds nothing, and a
// second request of the same header is served
// (TestHeaderBudgetStdServer).
func TestHeaderBudgetOverH2C(t *testing.T) {
	const (
		maxBytes = 64 << 10
		limit    = maxBytes + 40<<10
		filler   = 30 << 10
	)
	g, p, u := newGateBackend(t)
	m := newMetrics()
	_, _, base := startProxy(t, Config{MaxHeaderBytes: maxBytes, HeaderBudget: limit}, p, u, m)
	if got := testutil.ToFloat64(m.headerLimit); got != limit {
		t.Errorf("fanout_header_budget_limit_bytes = %v, want %d", got, limit)
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	get := func(query string) *http.Response { return getWithFiller(t, c, base, query, filler) }
	used := func() int64 { return int64(testutil.ToFloat64(m.headerUsed)) }

	held := get("block=1")
	g.waitStarted(t)
	if got := used(); got < maxBytes+filler || got > maxBytes+filler+1024 {
		t.Errorf("an h2c connection with one request of a %d KiB header holds %d bytes of budget, want --max-header-bytes (%d) and the header's size", filler>>10, got, maxBytes)
	}

	g.checkRefused(t, get("block=2"))
	if got := testutil.ToFloat64(m.headerExhausted); got != 1 {
		t.Errorf("fanout_header_budget_exhausted_total = %v, want 1", got)
	}

	g.open()
	io.Copy(io.Discard, held.Body)
	held.Body.Close()
	testkit.WaitFor(t, "the request's header budget to come back", func() bool { return used() == maxBytes })
	tr.CloseIdleConnections()
	testkit.WaitFor(t, "the connection's header budget to come back", func() bool { return used() == 0 })
}

// TestHeaderBudgetStdServer: with --h1-server std, HTTP/1.1 and h2c
// requests alike take their header's HTTP/2 size from the header budget
// while they run (withHeaderBudget), as with --listen-tls; a request whose
// header does not fit gets 431 and never reaches the apiserver; an h2c
// connection holds nothing of its own; all comes back when the requests
// end.
func TestHeaderBudgetStdServer(t *testing.T) {
	const (
		filler = 30 << 10
		limit  = filler + 20<<10 // one header of the filler fits, two do not
	)
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2c"}[h2c], func(t *testing.T) {
			g, p, u := newGateBackend(t)
			m := newMetrics()
			_, _, base := startProxy(t, Config{H1Server: H1ServerStd, MaxHeaderBytes: 64 << 10, HeaderBudget: limit}, p, u, m)
			c := testkit.NewClient(t, h2c)
			get := func(query string) *http.Response { return getWithFiller(t, c, base, query, filler) }
			used := func() int64 { return int64(testutil.ToFloat64(m.headerUsed)) }

			held := get("block=1")
			g.waitStarted(t)
			if got := used(); got < filler || got > filler+1024 {
				t.Errorf("a request of a %d KiB header holds %d bytes of budget, want the header's size", filler>>10, got)
			}
			g.checkRefused(t, get("block=2"))
			g.open()
			io.Copy(io.Discard, held.Body)
			held.Body.Close()
			testkit.WaitFor(t, "the request's header budget to come back", func() bool { return used() == 0 })
		})
	}
}

// TestAutoHeaderBudget: auto is a sixteenth of the Go memory limit within
// its bounds, never less than one header of the largest size, and an
// explicit budget smaller than that is refused.
func TestAutoHeaderBudget(t *testing.T) {
	for _, tc := range []struct {
		limit    int64
		maxBytes int
		want     int64
	}{
		{241591910, DefaultMaxHeaderBytes, 241591910 / 16}, // under the injected 256Mi
		{math.MaxInt64, DefaultMaxHeaderBytes, DefaultHeaderBudget},
		{16 << 20, DefaultMaxHeaderBytes, MinAutoHeaderBudget},
		{64 << 30, DefaultMaxHeaderBytes, DefaultHeaderBudget},
		{241591910, 32 << 20, 32 << 20},
	} {
		if got := AutoHeaderBudget(tc.limit, tc.maxBytes); got != tc.want {
			t.Errorf("AutoHeaderBudget(%d, %d) = %d, want %d", tc.limit, tc.maxBytes, got, tc.want)
		}
	}
	if err := (Config{HeaderBudget: 512 << 10}).Validate(); err == nil || !strings.Contains(err.Error(), "--header-budget") {
		t.Errorf("a header budget under --max-header-bytes: %v, want an error naming --header-budget", err)
	}
	if err := (Config{HeaderBudget: 512 << 10, MaxHeaderBytes: 64 << 10}).Validate(); err != nil {
		t.Errorf("a header budget over --max-header-bytes: %v", err)
	}
}

// checkRefused checks that refused, the answer to a request whose header
// did not fit the budget, is a 431 Status naming --header-budget, given
// before the request could reach g.
func (g *gateBackend) checkRefused(t *testing.T, refused *http.Response) {
	t.Helper()
	if refused.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		refused.Body.Close()
		g.open()
		t.Fatalf("a header past the budget: %d, want 431", refused.StatusCode)
	}
	if st := testkit.ReadStatus(t, refused); !strings.Contains(st.Message, "--header-budget") {
		t.Errorf("the 431 says %q, want it to name --header-budget", st.Message)
	}
	select {
	case u := <-g.started:
		t.Errorf("the refused request reached the apiserver (%s)", u)
	default: // it was answered before: the refusal is synchronous
	}
}

// getWithFiller GETs configmaps with query through base, its header padded
// by an X-Filler of filler bytes.
func getWithFiller(t *testing.T, c *http.Client, base, query string, filler int) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/namespaces/default/configmaps?"+query, nil)
	req.Header.Set("X-Filler", strings.Repeat("f", filler))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
