//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; the per-endpoint pools still use it (moving them to http.Transport is a follow-up), and v0.60 is needed for its security fixes.

package transport

import (
	"errors"
	"strings"

	"golang.org/x/net/http2"
)

// Messages of x/net/http2 (v0.57.0) errors that prove the server never
// started processing the stream. x/net keeps the values unexported, so
// they can only be recognised by text; TestXNetErrorsClassified makes
// real x/net produce the wrapped forms, so an x/net upgrade that rewords
// them fails the tests rather than silently turning retries off.
const (
	// The server's GOAWAY named a last stream below ours.
	msgGotGoAway = "http2: Transport received Server's graceful shutdown GOAWAY"
	// The connection was closing or could not take the stream.
	msgConnUnusable = "http2: client conn not usable"
	// The connection closed before its first stream was sent.
	msgConnNotEstablished = "http2: client conn could not be established"
	// x/net wanted to retry one of the above (or a REFUSED_STREAM) on a
	// new connection but could not rewind the request body: the error it
	// gave up with is formatted inside the brackets.
	prefixCannotRetry = "http2: Transport: cannot retry err ["
	// A GOAWAY with an error code before the connection's first stream was
	// processed; x/net does not retry this one itself.
	prefixGoAwayFirstStream = "http2: Transport received GOAWAY from server ErrCode:"
)

// classify wraps err in *UnprocessedError, Refused set, when it proves that the
// apiserver at endpoint did not process the request, and returns it
// unchanged otherwise: an error that may follow processing (a reset
// stream, a connection lost mid-response, a GOAWAY naming our stream as
// received) must never be retried, since the request may have had its
// effect.
//
// Unprocessed are:
//   - dial and TLS handshake errors (already wrapped by the dialer);
//   - http2.StreamError with ErrCodeRefusedStream;
//   - the GOAWAY, unusable-connection and not-established errors above.
//
// x/net itself retries the last three kinds on a new connection to the same
// endpoint, with backoff, when it can rewind the body; they reach us when
// it cannot, or after its retries ran out. http2.GoAwayError is not
// unprocessed: x/net gives it only to streams the GOAWAY's LastStreamID
// says the server received.
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
	var ga http2.GoAwayError
	if errors.As(err, &ga) {
		return false
	}
	switch msg := err.Error(); msg {
	case msgGotGoAway, msgConnUnusable, msgConnNotEstablished:
		return true
	default:
		return strings.HasPrefix(msg, prefixCannotRetry) || strings.HasPrefix(msg, prefixGoAwayFirstStream)
	}
}
