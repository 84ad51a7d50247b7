package testkit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// ClientTimeout bounds RawRequest's connection: a failure bound for
// hangs, not a speed target.
const ClientTimeout = 30 * time.Second

// NewClient is an HTTP/1.1 client, or with h2c an HTTP/2 client with
// prior knowledge, as client-go is when pointed at an http:// server such
// as fanout's loopback listener. Its idle connections close when the test
// ends.
func NewClient(tb testing.TB, h2c bool) *http.Client {
	tb.Helper()
	tr := &http.Transport{}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// RawRequest writes raw bytes on a new connection to addr and reads one
// response, for requests no http.Client sends (absolute-form, a missing
// Host, odd headers). The connection closes when the test ends.
func RawRequest(tb testing.TB, addr, raw string) *http.Response {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(ClientTimeout))
	if _, err := io.WriteString(conn, raw); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatalf("reading the answer to %q: %v", raw[:min(len(raw), 40)], err)
	}
	return resp
}
