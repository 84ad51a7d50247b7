// Package balancer chooses a kube-apiserver endpoint for each request.
//
// The resolver pushes full endpoint snapshots through Update. Each update
// builds a new immutable snapshot of the endpoint set and publishes it
// through an atomic.Pointer, so Pick takes no lock. Per-endpoint state (in-flight counters, the latency
// estimate, ejection) lives in *Endpoint values keyed by address and
// survives updates. Latency is judged per request Class: each class has a
// baseline, the usual latency of such requests across endpoints, and an
// endpoint's estimate is a score relative to it, so that a LIST is
// compared with LISTs and a GET with GETs.
package balancer

import (
	"errors"
	"sync"
	"sync/atomic"
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

// Class groups short requests whose latencies are comparable: the verb of
// kube-apiserver's RequestInfo. A LIST can take a hundred times as long as
// a GET, so the balancer judges an endpoint's latency against the usual
// latency of the same class of request, never across classes (see
// Endpoint.observe). The zero value, ClassOther, is for non-resource
// requests (discovery, /version, /openapi) and anything unrecognised.
//
// Class is a small integer so that per-class state is a fixed array of
// atomics: the request path needs no map and no lock to find it.
type Class uint8

const (
	ClassOther Class = iota
	ClassGet
	ClassList
	ClassCreate
	ClassUpdate
	ClassPatch
	ClassDelete
	ClassDeleteCollection
)

// numClasses sizes the per-class arrays; a Class at or beyond it counts as
// ClassOther.
const numClasses = int(ClassDeleteCollection) + 1

var classNames = [numClasses]string{"other", "get", "list", "create", "update", "patch", "delete", "deletecollection"}

// String returns the verb of the class, "other" for ClassOther and for
// values outside the enumeration.
func (c Class) String() string { return classNames[c.index()] }

func (c Class) index() int {
	if int(c) >= numClasses {
		return int(ClassOther)
	}
	return int(c)
}

// ClassForVerb returns the class of a resource request from its RequestInfo
// verb. Unknown verbs, and those of long-running requests (watch, proxy),
// give ClassOther. Pass only a resource request's verb: for a non-resource
// request RequestInfo holds the lowercased HTTP method, and a GET of
// /openapi/v3 is not comparable with a GET of one object.
func ClassForVerb(verb string) Class {
	switch verb {
	case "get":
		return ClassGet
	case "list":
		return ClassList
	case "create":
		return ClassCreate
	case "update":
		return ClassUpdate
	case "patch":
		return ClassPatch
	case "delete":
		return ClassDelete
	case "deletecollection":
		return ClassDeleteCollection
	}
	return ClassOther
}

// PickInfo describes the request being balanced.
type PickInfo struct {
	Kind Kind
	// Class is the request's verb class. It matters only for Short
	// requests, whose latency is compared with that of their class.
	Class Class
	// Avoid is an address that must not be chosen if any other endpoint is
	// usable; the proxy sets it when it retries a request elsewhere.
	Avoid string
	// Unloaded asks for an endpoint other than Avoid that is usable and
	// not penalised for overload (see DoneInfo.Overloaded). Pick fails
	// with ErrNoAlternative rather than relax that: the proxy sets it when
	// it considers moving an overload rejection, which is worth doing only
	// towards an apiserver that is not saturated too.
	Unloaded bool
	// Oldest asks for the usable endpoint that has been usable longest, as
	// far as the balancer has seen (added, probe passing again, back from
	// an ejection or a shutdown hold), ties going to fewer open long
	// requests. The proxy uses it to retry a watch that a young apiserver
	// rejected with 410 Gone: the longest-running one has the longest
	// watch cache history.
	Oldest bool
	// Only asks for the endpoint at this address and no other, whatever
	// its state; Pick fails with ErrNoAlternative when it is no longer
	// among the endpoints. The proxy sets it to send a request again to
	// the endpoint that answered it 401, whose connections the transport
	// just renewed (another endpoint's are not): the request has to go
	// where the renewal happened. It overrides Avoid, Unloaded and Oldest.
	Only string
	// API is what a resource request is about. While the endpoints serve
	// different APIs (SetAPIs), the pick keeps to those that serve it, if
	// any of them is up; otherwise, and for the zero API, it is ignored.
	API API
	// Served asks for a usable endpoint other than Avoid that serves API
	// as far as the balancer knows (an endpoint whose discovery is not
	// known yet counts as serving it). Pick fails with ErrNoAlternative
	// rather than relax that, and whenever the balancer knows nothing of
	// APIs (SetAPIs(nil)): the proxy sets it to retry a request an
	// apiserver answered "no such path", which is worth doing only
	// towards one that serves the path.
	Served bool
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
	// Failed counts the result towards passive outlier detection: a 5xx
	// that is neither a shutdown signal nor kube-apiserver's 504 Timeout
	// (the request's own deadline ran out), a round trip that timed out,
	// or a connection lost mid-request. Config.ConsecutiveFailures of them in a row eject the
	// endpoint. 401, 403 and other 4xx are answers, never failures.
	Failed bool
	// DeadlineExpired says the answer was kube-apiserver's 504 Timeout:
	// the request's own deadline ran out (the client's ?timeout=, or the
	// apiserver's --request-timeout). It is the request's doing, not the
	// endpoint's: neither an error nor a latency sample.
	DeadlineExpired bool
	// ShuttingDown says the apiserver rejected the request because it is
	// shutting down (its 429 "The apiserver is shutting down" or 503
	// "apiserver is shutting down"). The endpoint gets no new requests
	// for Config.DrainHold; by then the readiness probe has seen /readyz
	// fail and keeps it out until the restarted apiserver is ready.
	ShuttingDown bool
	// Overloaded says the apiserver rejected the request for overload
	// (API Priority and Fairness or max-in-flight 429). The endpoint's
	// cost is raised for Config.OverloadPenalty and Pick with Unloaded
	// passes it over.
	Overloaded bool
	// Relayed says the answer's status may not be kube-apiserver's own: the
	// request went through it to another server (a proxy subresource, an
	// aggregated API, a kubelet). Such a result counts the request and
	// nothing else: its status, latency and mid-request errors say nothing
	// about the endpoint. Unavailable still ejects, since a dial or TLS
	// failure is fanout's own observation of the apiserver.
	Relayed bool
}

// Pick is the result of a successful pick: the endpoint, and Done, which
// releases the request it counts. It is a small value that may be copied
// freely: every copy shares one ticket, so Done counts the request once
// whichever copies call it, however often and concurrently.
//
// Done must be called when the request has finished (response body closed
// or the round trip failed).
type Pick struct {
	Endpoint *Endpoint

	t   *ticket
	gen uint64 // t.gen when the pick was made
}

// ticket is the state the copies of one Pick share. Tickets are recycled
// through a pool, so that picking allocates nothing; gen tells a ticket's
// uses apart. The first Done of a use moves gen on, which makes every
// other Done of that use, and of any stale copy from an older use, a
// no-op, before the ticket goes back to the pool.
type ticket struct {
	gen   atomic.Uint64
	kind  Kind
	class Class
	// hook replaces the balancer's bookkeeping in Picks made by NewPick.
	hook func(DoneInfo)
}

var tickets = sync.Pool{New: func() any { return new(ticket) }}

func newPick(e *Endpoint, kind Kind, class Class, hook func(DoneInfo)) Pick {
	t := tickets.Get().(*ticket)
	t.kind, t.class, t.hook = kind, class, hook
	return Pick{Endpoint: e, t: t, gen: t.gen.Load()}
}

// NewPick returns a Pick of e whose Done calls done (once, as for the
// balancer's own picks) instead of the balancer's bookkeeping. It is for
// fakes of the proxy's Picker in other packages' tests.
func NewPick(e *Endpoint, done func(DoneInfo)) Pick {
	return newPick(e, Short, ClassOther, done)
}

// Done reports how the picked request ended and stops counting it in
// flight. Only the first call through any copy of the Pick counts; the
// zero Pick's Done does nothing.
func (p Pick) Done(di DoneInfo) {
	if p.t == nil || !p.t.gen.CompareAndSwap(p.gen, p.gen+1) {
		return
	}
	kind, class, hook := p.t.kind, p.t.class, p.t.hook
	p.t.hook = nil
	tickets.Put(p.t)
	if hook != nil {
		hook(di)
		return
	}
	p.Endpoint.finish(kind, class, di)
}

// ErrNoEndpoints is returned by Pick when the resolver has published no
// endpoint yet, or an empty set. The proxy answers 503.
var ErrNoEndpoints = errors.New("no kube-apiserver endpoint is known")

// ErrNoAlternative is returned by Pick with PickInfo.Unloaded when every
// other endpoint is unusable or penalised for overload. The proxy then
// passes the overload rejection on to the client unchanged.
var ErrNoAlternative = errors.New("no other kube-apiserver endpoint is both usable and not overloaded")
