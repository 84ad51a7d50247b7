package transport

import "github.com/fanout-dev/fanout/internal/h2conn"

// classify wraps err in *UnprocessedError, Refused set, when it proves that the
// apiserver at endpoint did not process the request, and returns it
// unchanged otherwise: an error that may follow processing (a reset
// stream, a connection lost mid-response, a GOAWAY naming our stream as
// received) must never be retried, since the request may have had its
// effect.
//
// Unprocessed are dial and TLS handshake errors (already wrapped by the
// dialer) and what h2conn.Unprocessed recognises: http2.StreamError with
// ErrCodeRefusedStream, and a stream above a GOAWAY's last stream ID
// (h2conn.ErrStreamGoneAway). A connection that closed before the request
// was written (h2conn.ErrConnClosing) is tried on another connection
// first (conns.go). http2.GoAwayError is not unprocessed: the client
// gives it only to streams the GOAWAY's LastStreamID says the server
// received. net/http's client (ClientStd) has its errors mapped to these
// by stdConn (stdconn.go) before they get here; its REFUSED_STREAM is an
// http2.StreamError to errors.As.
func classify(endpoint string, err error) error {
	if err == nil || IsUnprocessed(err) {
		return err
	}
	if h2conn.Unprocessed(err) {
		return &UnprocessedError{Endpoint: endpoint, Err: err, Refused: true}
	}
	return err
}
