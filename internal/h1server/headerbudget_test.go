package h1server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// header is a request header of about size bytes, in 1 KiB lines; done
// ends it.
func header(path string, size int, done bool) string {
	var b strings.Builder
	b.WriteString("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n")
	line := "X-Filler: " + strings.Repeat("f", 1024-12) + "\r\n"
	for b.Len()+len(line) <= size {
		b.WriteString(line)
	}
	if done {
		b.WriteString("\r\n")
	}
	return b.String()
}

// TestH1ServerHeaderBudget: the header budget bounds the header bytes all
// connections hold. A header takes budget past its first headerFree
// bytes as it is read and keeps it while its handler runs; one that finds
// the budget spent gets 431 and its connection is closed; the budget
// comes back when the handler returns, when a connection closes in the
// middle of a header, and when an h2c connection (which holds
// MaxHeaderBytes for its life) closes. Every wait is on the budget's own
// counter.
func TestH1ServerHeaderBudget(t *testing.T) {
	const (
		limit    = 64 << 10
		maxBytes = 60 << 10
		big      = 40 << 10
	)
	used := prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"})
	exhausted := prometheus.NewCounter(prometheus.CounterOpts{Name: "exhausted"})
	b := budget.New(limit, used, exhausted)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	addr, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}), Config{MaxHeaderBytes: maxBytes, HeaderBudget: b})
	budgetIs := func(what string, ok func(int64) bool) {
		t.Helper()
		testkit.WaitFor(t, what, func() bool { return ok(b.Used()) })
		if got := testutil.ToFloat64(used); int64(got) != b.Used() {
			t.Errorf("the used gauge says %v, the budget %d", got, b.Used())
		}
	}
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c := dialServer(t, addr)
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	status := func(br *bufio.Reader) int {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	// A small header takes nothing.
	small, smallBR := dial()
	io.WriteString(small, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if got := status(smallBR); got != http.StatusOK {
		t.Fatalf("a small header: %d, want 200", got)
	}
	if b.Used() != 0 {
		t.Errorf("a small header took %d bytes of budget, want 0 (under headerFree)", b.Used())
	}
	// Nor does one that stalls while the budget is spent: it is read
	// (and cut by ReadHeaderTimeout, not here).
	spent := b.Limit()
	b.Take(spent)
	stalled, _ := dial()
	io.WriteString(stalled, "GET / HTTP/1.1\r\nHost: localhost\r\nX-Hold: ")
	// The header is parsed, and a pipelined small request answered, with
	// the budget spent.
	io.WriteString(small, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if got := status(smallBR); got != http.StatusOK {
		t.Errorf("a small header with the budget spent: %d, want 200", got)
	}
	b.Give(spent)
	stalled.Close()

	// A large header held by its handler keeps what it took.
	held, heldBR := dial()
	heldHeader := header("/held", big, true)
	io.WriteString(held, heldHeader)
	testkit.Wait(t, arrived, "the held request's handler to run")
	heldBytes := int64(len(heldHeader) - headerFree)
	if got := b.Used(); got != heldBytes {
		t.Errorf("a header of %d bytes held by its handler holds %d bytes of budget, want all but headerFree: %d", len(heldHeader), got, heldBytes)
	}

	// The next one does not fit: 431, and what it took comes back.
	refused, refusedBR := dial()
	io.WriteString(refused, header("/", big, true))
	if got := status(refusedBR); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header past the budget: %d, want 431", got)
	}
	if _, err := refusedBR.ReadByte(); err != io.EOF {
		t.Errorf("after the 431: read %v, want the connection closed", err)
	}
	if got := testutil.ToFloat64(exhausted); got != 1 {
		t.Errorf("exhausted = %v, want 1", got)
	}
	budgetIs("the refused header's budget to come back", func(u int64) bool { return u == heldBytes })

	// A header cut in the middle gives its budget back when its
	// connection closes.
	cut, _ := dial()
	cutHeader := header("/", 16<<10, false)
	io.WriteString(cut, cutHeader)
	budgetIs("the unfinished header to take budget", func(u int64) bool { return u == heldBytes+int64(len(cutHeader)-headerFree) })
	cut.Close()
	budgetIs("the unfinished header's budget to come back", func(u int64) bool { return u == heldBytes })

	// The held request ends: all of it comes back, and the header that
	// was refused now fits.
	close(release)
	if got := status(heldBR); got != http.StatusOK {
		t.Errorf("the held request: %d, want 200", got)
	}
	budgetIs("the held header's budget to come back", func(u int64) bool { return u == 0 })
	again, againBR := dial()
	io.WriteString(again, header("/", big, true))
	if got := status(againBR); got != http.StatusOK {
		t.Errorf("the header refused before, with the budget back: %d, want 200", got)
	}
	budgetIs("its budget to come back", func(u int64) bool { return u == 0 })

	// An h2c connection holds MaxHeaderBytes for its life; a second one
	// does not fit and is closed before net/http sees it.
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	defer h2.CloseIdleConnections()
	resp, err := (&http.Client{Transport: h2}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if b.Used() != maxBytes {
		t.Errorf("an open h2c connection holds %d bytes of budget, want MaxHeaderBytes (%d)", b.Used(), maxBytes)
	}
	other := &http.Transport{Protocols: h2.Protocols}
	defer other.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: other}).Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("a second h2c connection past the budget got %d, want it closed", resp.StatusCode)
	}
	if got := testutil.ToFloat64(exhausted); got != 2 {
		t.Errorf("exhausted = %v, want 2", got)
	}
	h2.CloseIdleConnections()
	budgetIs("the h2c connection's budget to come back", func(u int64) bool { return u == 0 })
}
