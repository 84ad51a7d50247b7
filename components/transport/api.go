// Package transport owns the upstream connections to kube-apiserver: per
// endpoint, one HTTP/2 pool that presents the client certificate (and adds
// the sidecar's bearer token) and one that presents no certificate, for
// requests that bring their own credentials.
package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// AuthMode selects which credentials a request is sent with.
type AuthMode uint8

const (
	// AuthSidecar sends the kubeconfig's client certificate and, if the
	// kubeconfig has one, its bearer token.
	AuthSidecar AuthMode = iota
	// AuthPassthrough sends no client certificate and leaves the request's
	// own Authorization (or WebSocket bearer protocol) untouched.
	// kube-apiserver checks a client certificate before a bearer token, so a
	// request that carries both would act with the sidecar's identity.
	AuthPassthrough
)

func (m AuthMode) String() string {
	if m == AuthPassthrough {
		return "passthrough"
	}
	return "sidecar"
}

// Credentials supplies the client's identity. All methods are safe for
// concurrent use and are called on every new connection (certificate) or
// request (token), so an implementation may rotate material underneath.
type Credentials interface {
	// RootCAs is the pool that verifies kube-apiserver's serving certificate.
	RootCAs() *x509.CertPool
	// ClientCertificate returns the certificate to present, or nil for none.
	ClientCertificate() (*tls.Certificate, error)
	// Token returns the bearer token, or "" for none.
	Token() (string, error)
}

// UnprocessedError wraps a failure that happened before kube-apiserver
// received the request: a dial or TLS handshake error, a refused stream, or
// a stream dropped by GOAWAY before processing. Such a request is safe to
// retry on another endpoint.
type UnprocessedError struct {
	Endpoint string
	Err      error
	// Refused says the endpoint was reached and its HTTP/2 connection
	// turned the stream away unprocessed (REFUSED_STREAM, a GOAWAY, a
	// closing or unusable connection). kube-apiserver does that for
	// --goaway-chance, idle connections and after 401s; none of it says
	// the apiserver is down. False means the endpoint could not be reached
	// at all (dial, TLS handshake): it is down as far as fanout can tell.
	Refused bool
}

func (e *UnprocessedError) Error() string {
	return fmt.Sprintf("kube-apiserver %s did not receive the request: %v", e.Endpoint, e.Err)
}

func (e *UnprocessedError) Unwrap() error { return e.Err }

// IsUnprocessed reports whether err says the request never reached an
// apiserver.
func IsUnprocessed(err error) bool {
	var u *UnprocessedError
	return errors.As(err, &u)
}
