// Package balancer chooses a kube-apiserver endpoint for each request.
//
// The resolver pushes full endpoint snapshots through Update. Each update
// builds a new immutable picker that is published through an atomic.Pointer,
// so Pick takes no lock. Per-endpoint state (in-flight counters, the latency
// estimate, ejection) lives in *Endpoint values keyed by address and
// survives updates.
package balancer

import (
	"errors"
	"time"
)

// Kind separates short requests from long-running ones (watch, exec,
// attach, port-forward, proxy, logs). Long-running requests are balanced by
// their own open count and never feed the latency estimate.
type Kind uint8

const (
	Short Kind = iota
	Long
)

func (k Kind) String() string {
	if k == Long {
		return "long"
	}
	return "short"
}

// PickInfo describes the request being balanced.
type PickInfo struct {
	Kind Kind
	// Avoid is an address that must not be chosen if any other endpoint is
	// usable; the proxy sets it when it retries a request elsewhere.
	Avoid string
}

// DoneInfo reports how a picked request ended.
type DoneInfo struct {
	// Err is the transport error, if the request failed before or while the
	// response arrived. nil when any HTTP response was received.
	Err error
	// Unavailable is true when the endpoint itself failed (dial error,
	// refused connection, dead connection): it is ejected for a while.
	Unavailable bool
	// StatusCode is the upstream HTTP status, 0 if none.
	StatusCode int
	// Latency is the time from pick to response headers. Zero when no
	// response arrived. Used only for Short requests.
	Latency time.Duration
}

// Pick is the result of a successful pick.
type Pick struct {
	Endpoint *Endpoint
	// Done must be called exactly once, when the request has finished
	// (response body closed or the round trip failed).
	Done func(DoneInfo)
}

// Picker picks an endpoint. Implementations are immutable and safe for
// concurrent use; Pick never blocks.
type Picker interface {
	Pick(PickInfo) (Pick, error)
}

// ErrNoEndpoints is returned by Pick when the resolver has published no
// endpoint yet, or an empty set. The proxy answers 503.
var ErrNoEndpoints = errors.New("no kube-apiserver endpoint is known")
