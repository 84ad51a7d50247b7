// Package h2conn is fanout's own HTTP/2 client connection: one connection
// over an already dialled (and TLS-handshaken, ALPN "h2") net.Conn, on
// which RoundTrip sends requests. Which server it reaches, how it was
// dialled, and how connections are pooled are the caller's
// (components/transport keeps a set per endpoint and certificate).
//
// Why: Go's HTTP/2 client runs a goroutine per request to write it and
// hands each answer over through several channels; measured in fanout at
// saturation that is most of the CPU per request fanout spends above
// HAProxy (docs/footprint.md, "fanout's own HTTP/2 client"). Here the
// caller's goroutine writes the request's HEADERS itself, under the
// connection's write lock, and the connection's one reading goroutine
// hands the answer over through one channel. A stream holds no goroutine
// while its body is read, so an open watch costs a stream struct and the
// data not yet read. A request body is written by a goroutine of its own
// (writes are the rarer requests), within the server's windows.
//
// What it keeps of x/net's behaviour: flow control with the windows of
// Config, PINGs after ReadIdleTimeout of silence, IdleConnTimeout, no new
// stream beyond the server's MAX_CONCURRENT_STREAMS (CanTakeStream tells
// the pool to open another connection), transparent gzip when the request
// did not ask for an encoding, trailers, and errors that say whether the
// server can have seen the request (Unprocessed, ErrConnClosing): a
// stream above a GOAWAY's last stream ID, a REFUSED_STREAM, or a
// connection that was closing before the request was written. It never
// retries a request itself: the caller decides. A server that breaks the
// protocol gets what RFC 9113 asks: a GOAWAY and the connection closed
// for a connection error (SETTINGS out of range, a send window past
// 2^31-1, a header block read past its limit), an RST_STREAM for a stream
// error; and a connection stops taking streams at stream ID 2^31-1.
// docs/security.md lists where it differs from x/net's Transport;
// peer_test.go is the scripted server its tests drive it with.
//
// It uses x/net's http2 Framer, hpack and error types only.
package h2conn
