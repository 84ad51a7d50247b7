//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; fanout's client uses its Framer, hpack and error types, which net/http does not export.

package transport

import (
	"errors"

	"golang.org/x/net/http2"
)

// classify wraps err in *UnprocessedError, Refused set, when it proves that the
// apiserver at endpoint did not process the request, and returns it
// unchanged otherwise: an error that may follow processing (a reset
// stream, a connection lost mid-response, a GOAWAY naming our stream as
// received) must never be retried, since the request may have had its
// effect.
//
// Unprocessed are dial and TLS handshake errors (already wrapped by the
// dialer) and http2.StreamError with ErrCodeRefusedStream. The client
// (h2client.go) wraps the other cases it can prove itself: a stream above
// a GOAWAY's last stream ID, and a connection that closed before the
// request was written (it tries another connection first).
// http2.GoAwayError is not unprocessed: the client gives it only to
// streams the GOAWAY's LastStreamID says the server received.
func classify(endpoint string, err error) error {
	if err == nil || IsUnprocessed(err) {
		return err
	}
	if unprocessedByServer(err) {
		return &UnprocessedError{Endpoint: endpoint, Err: err, Refused: true}
	}
	return err
}

func unprocessedByServer(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.Code == http2.ErrCodeRefusedStream
	}
	return false
}
