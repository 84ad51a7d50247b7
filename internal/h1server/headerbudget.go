package h1server

import (
	"errors"
	"io"
	"math"
	"net"
	"sync/atomic"
)

// The header budget (Config.HeaderBudget) bounds the request header bytes
// held by all connections together: MaxHeaderBytes bounds one header,
// and without a bound on the sum every open connection could hold one of
// 1 MiB being read, and keep it while its request runs.
//
// A connection reads a header through its headerReader. The first
// headerFree bytes come with the connection (its read buffer holds as
// much, and the connection limit counts them); past them it takes budget
// for what each read from the socket returned.
// A header that finds the budget spent gets 431 and the connection is
// closed. What it took is given back when its request ends (the handler
// returned) or its connection closes, never earlier: the parsed header
// lives as long as the request.
//
// A connection handed to HTTP/2 (h2c) takes MaxHeaderBytes for its life:
// net/http's server reads one header block at a time on it, of up to as
// much. The headers of its requests, once parsed, are the handler's to
// count (the listener does).

// Budget is a byte budget shared by all connections (fanout's
// internal/budget.Bytes is one). Take reserves n bytes and reports whether
// they fitted, reserving nothing when they did not; Give returns n bytes
// taken. Both are called from many connections at once.
type Budget interface {
	Take(n int64) bool
	Give(n int64)
}

// headerFree is how much of each header a connection reads without
// taking budget: its read buffer's size.
const headerFree = 4 << 10

// errHeaderBudget is a header read refused for want of budget: 431.
var errHeaderBudget = errors.New("http: request header budget spent")

// headerReader is the connection's reader: while a header is being read
// it limits it (MaxHeaderBytes and net/http's slack, as an
// io.LimitedReader would) and takes budget for it; otherwise it passes
// reads through.
type headerReader struct {
	r      io.Reader
	budget Budget // nil: no budget
	// n is what the header may still read, math.MaxInt64 outside one.
	n int64
	// counting says a header is being read; read is what it read from
	// the socket so far, held what it took from the budget.
	counting bool
	read     int64
	held     int64
	// spent says the budget refused a read of this header.
	spent bool
}

// start begins a header that may read limit bytes.
func (h *headerReader) start(limit int64) {
	h.release()
	h.n, h.counting, h.read, h.spent = limit, true, 0, false
}

// end ends the header's reading (what it took stays held until release)
// and reports whether it hit its limit and whether the budget refused it.
func (h *headerReader) end() (hit, spent bool) {
	hit, spent = h.n <= 0, h.spent
	h.n, h.counting = math.MaxInt64, false
	return hit, spent
}

// release gives back what the last header took.
func (h *headerReader) release() {
	if h.held > 0 {
		h.budget.Give(h.held)
		h.held = 0
	}
}

func (h *headerReader) Read(p []byte) (int, error) {
	if h.n <= 0 {
		return 0, io.EOF
	}
	if h.spent {
		return 0, errHeaderBudget // refused once, counted once
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	h.n -= int64(n)
	h.read += int64(n)
	// Taken after the read, for what arrived: until the parser takes
	// them, the bytes are in the connection's read buffer, which the
	// connection limit counts; a header that does not fit is refused
	// before they are parsed.
	if h.counting && h.budget != nil {
		if need := h.read - headerFree - h.held; need > 0 {
			if !h.budget.Take(need) {
				h.spent = true
				return 0, errHeaderBudget
			}
			h.held += need
		}
	}
	return n, err
}

// h2cConn is a connection handed to net/http's HTTP/2 server holding
// MaxHeaderBytes of the header budget, given back once when it closes.
type h2cConn struct {
	*prefaceConn
	budget Budget
	held   atomic.Int64
}

func (c *h2cConn) Close() error {
	c.budget.Give(c.held.Swap(0))
	return c.prefaceConn.Close()
}

// takeH2C returns p holding the budget an HTTP/2 connection needs, or
// false when the budget cannot spare it.
func (s *Server) takeH2C(p *prefaceConn) (net.Conn, bool) {
	if s.headerBudget == nil {
		return p, true
	}
	n := int64(s.maxHeaderBytes)
	if !s.headerBudget.Take(n) {
		return nil, false
	}
	c := &h2cConn{prefaceConn: p, budget: s.headerBudget}
	c.held.Store(n)
	return c, true
}
