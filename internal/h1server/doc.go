// Package h1server is an HTTP/1.x server: one goroutine per connection
// that reads and serves its requests in turn, and none per request.
//
// It exists for the cost of each request. net/http's HTTP/1.1 server
// starts a goroutine per request that reads the connection to notice the
// client leaving (its "background read"), and stops it at the end of the
// request with a deadline in the past and a wait: a goroutine, a read that
// finds nothing, three deadline changes and two switches per request.
// Here the client leaving is noticed by one goroutine for all connections
// (an epoll set asking for hang-ups only, Linux), where the connection is
// registered once for its life, and the response writer and its header
// map are the connection's, reused by each request.
//
// What it owns: reading requests (net/http's own parser, http.ReadRequest
// without its dropping of the Host lines, and the checks net/http's server
// makes after it: Host, header names and values, the number of header
// values, the protocol version, Expect),
// keep-alive, the response writer (net/http's rules: a length for a short
// body written at once, chunking otherwise, Connection: close where the
// request or the response asks for it, HEAD and bodiless statuses, Date and
// a sniffed Content-Type when missing, at most 256 KiB of an unread body
// discarded to keep the connection), 100 Continue on the first read of the
// body and other 1xx answers, request and response trailers, Hijack,
// deadlines (http.ResponseController), panics (http.ErrAbortHandler)
// cutting the connection, ReadHeaderTimeout and IdleTimeout, a header
// budget shared by all connections (headerbudget.go), Shutdown and
// Close, handing a connection that opens with the HTTP/2 preface to
// net/http (H2C), and detached streams (Detach): a long-running answer
// copied to the client by a small goroutine of its own once its handler
// returned. TestH1ServerMatchesNetHTTP, TestSmuggling (request smuggling
// and framing cases) and FuzzH1ServerMatchesNetHTTP hold its answers to
// net/http's; docs/security.md lists where they differ.
//
// What it deliberately does not do, compared with net/http's server: TLS
// (serve TLS with net/http), HTTP/2 other than the h2c hand-off, the
// "Upgrade: h2c" dance, read and write timeouts (a handler sets
// deadlines), ConnState and ConnContext hooks, net/http's
// http.LocalAddrContextKey (http.ServerContextKey is set, to an
// http.Server that describes this one, so that httputil.ReverseProxy
// aborts an answer whose upstream broke as under net/http), keep-alive toggling,
// and "PRI * HTTP/2.0" requests other than the h2c preface (505). Where
// the hang-up watcher is not available (not Linux), a client leaving in
// the middle of a request is noticed when a write to it fails; a detached
// stream reads its connection with a goroutine of its own instead.
package h1server
