//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; fanout's client (components/transport) uses its Framer, hpack and error types, which net/http does not export.

package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/kstatus"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// verdict is what an apiserver's answer means for the request: pass it on,
// or send it elsewhere because the apiserver rejected it before processing
// anything.
type verdict uint8

const (
	// verdictAnswer is passed on to the client as is.
	verdictAnswer verdict = iota
	// verdictShutdown: the apiserver is shutting down. Its endpoint is
	// drained at once and the request, never processed, goes elsewhere.
	verdictShutdown
	// verdictOverload: priority and fairness (or max-in-flight) rejected
	// the request. It moves, once, only to an endpoint that is not
	// overloaded too; otherwise the client gets the 429 and retries it
	// itself after Retry-After.
	verdictOverload
	// verdictThrottled: any other 429, e.g. a watch cache that is not
	// ready yet or a resourceVersion newer than this apiserver has seen.
	// Another apiserver may well serve a read; a write is not moved,
	// since nothing proves this 429 came before processing.
	verdictThrottled
	// verdictUnauthorized: a 401. If the request went with the sidecar's
	// client certificate, the certificate of its connections may have
	// expired, or the apiserver's client CA rotated, while newer material
	// is on disk: the transport re-reads the credentials and renews the
	// endpoint's connections (transport.RenewAfterUnauthorized), and the
	// request is sent once more to the same endpoint. A 401 to a request
	// that brings its own token is the caller's to handle.
	verdictUnauthorized
	// verdictTimeout: a 504 Timeout Status (isTimeoutStatus), or a 500
	// or 504 after the request's own ?timeout= (pastOwnDeadline), what
	// kube-apiserver answers when the request's own deadline ran out:
	// the client's ?timeout=, or the apiserver's --request-timeout. It is
	// passed on like verdictAnswer and never retried (the request may
	// have been processed, and its time is up), but it is no failure of
	// the endpoint's: a client's short timeouts must not eject healthy
	// apiservers.
	verdictTimeout
)

// Bodies of kube-apiserver's rejections (k8s.io/apiserver v0.37.2), which
// it writes with http.Error (text/plain, one trailing newline) or as a
// JSON Status.
const (
	// filters.WithRetryAfter, once --shutdown-delay-duration has elapsed
	// and --shutdown-send-retry-after is set: 429 with Retry-After: 5.
	shutdown429Body = "The apiserver is shutting down, please try again later."
	// filters.WithWaitGroup and WithWatchTerminationDuringShutdown, once
	// the server no longer accepts requests: 503 with Retry-After: 1 and a
	// JSON Status NewServiceUnavailable("apiserver is shutting down").
	shutdown503Message = "apiserver is shutting down"
	// filters.WithPriorityAndFairness and WithMaxInFlightLimit: 429 with
	// Retry-After. APF adds the X-Kubernetes-PF-* headers of the request's
	// classification; max-in-flight does not.
	overloadBody = "Too many requests, please try again later."
)

// APF's classification headers (k8s.io/api/flowcontrol/v1
// ResponseHeaderMatched*). They come with every classified response, so
// alone they prove nothing; with overloadBody they mark an APF rejection.
const (
	headerPFPriorityLevel = "X-Kubernetes-PF-PriorityLevel-UID"
	headerPFFlowSchema    = "X-Kubernetes-PF-FlowSchema-UID"
)

// maxInspectBody bounds how much of a 429 or 503 body is read to classify
// it; the rejections above are far shorter.
const maxInspectBody = 4 << 10

// inspect classifies resp. For a 429 or 503 it reads the (short) body to
// tell the rejections apart, and puts it back so the response can still be
// passed on unchanged. apf is true for an overload rejection that carries
// APF's headers.
func inspect(resp *http.Response) (v verdict, apf bool) {
	if resp.StatusCode == http.StatusUnauthorized {
		return verdictUnauthorized, false
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		return verdictAnswer, false
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxInspectBody+1))
	resp.Body = &rereadBody{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), c: resp.Body}
	if err != nil || len(buf) > maxInspectBody {
		if resp.StatusCode == http.StatusTooManyRequests {
			return verdictThrottled, false
		}
		return verdictAnswer, false
	}
	if resp.StatusCode == http.StatusGatewayTimeout {
		if isTimeoutStatus(buf) {
			return verdictTimeout, false
		}
		return verdictAnswer, false
	}
	body := strings.TrimSpace(string(buf))
	if resp.StatusCode == http.StatusServiceUnavailable {
		if isShutdownStatus(buf) {
			return verdictShutdown, false
		}
		return verdictAnswer, false
	}
	switch body {
	case shutdown429Body:
		return verdictShutdown, false
	case overloadBody:
		return verdictOverload, resp.Header.Get(headerPFPriorityLevel) != "" || resp.Header.Get(headerPFFlowSchema) != ""
	}
	return verdictThrottled, false
}

// isShutdownStatus reports whether body is the JSON Status of a shutting
// down apiserver's 503.
func isShutdownStatus(body []byte) bool {
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	if json.Unmarshal(body, &st) != nil {
		return false
	}
	return st.Kind == "Status" && st.Code == http.StatusServiceUnavailable && st.Message == shutdown503Message
}

// isTimeoutStatus reports whether body is kube-apiserver's 504 Timeout
// Status (apierrors.NewTimeoutError), in either form it takes: JSON from
// filters.WithTimeoutForNonLongRunningRequests, which encodes the bare
// Status (no kind), or from a handler's own deadline
// (responsewriters.ErrorNegotiated: JSON with its kind, or protobuf for a
// client that asks for it).
func isTimeoutStatus(body []byte) bool {
	if kstatus.IsProtobuf(body) {
		reason, code, ok := kstatus.ProtobufStatus(body)
		return ok && reason == statusReasonTimeout && code == http.StatusGatewayTimeout
	}
	var st struct {
		Kind   string       `json:"kind"`
		Reason statusReason `json:"reason"`
		Code   int          `json:"code"`
	}
	if json.Unmarshal(body, &st) != nil {
		return false
	}
	return (st.Kind == "Status" || st.Kind == "") && st.Reason == statusReasonTimeout && st.Code == http.StatusGatewayTimeout
}

// pastOwnDeadline reports whether a 500 or 504 came after the request's
// own ?timeout= had run out, timed from when fanout sent it, hence no
// sooner than kube-apiserver's deadline, which starts when the request
// reaches it. Such an answer is the deadline's, whatever its body says:
// kube-apiserver answers most with its 504 Timeout (verdictTimeout), but
// one whose deadline runs out inside the storage layer gets a 500
// "context deadline exceeded" Status, without a reason (1 in 300 LISTs
// with ?timeout=1ns on a real apiserver, e2e
// TestClientTimeoutIsNotAnEndpointFailure).
func pastOwnDeadline(u *url.URL, status int, elapsed time.Duration) bool {
	if status != http.StatusInternalServerError && status != http.StatusGatewayTimeout {
		return false
	}
	d, err := time.ParseDuration(u.Query().Get("timeout"))
	return err == nil && d > 0 && elapsed >= d
}

// rereadBody is a response body with its inspected head put back.
type rereadBody struct {
	io.Reader
	c io.Closer
}

func (b *rereadBody) Close() error { return b.c.Close() }

// failedStatus reports whether an answer counts towards passive outlier
// detection: the 5xx an apiserver in trouble gives. 501 and 505 say
// nothing about its health.
func failedStatus(code int) bool {
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// connectFailed reports whether err says the endpoint could not be
// reached at all (dial, TLS handshake): it is ejected at once. A stream
// that the endpoint's HTTP/2 connection turned away
// (transport.UnprocessedError.Refused) is not one.
func connectFailed(err error) bool {
	if isDialError(err) {
		return true
	}
	var u *transport.UnprocessedError
	return errors.As(err, &u) && !u.Refused
}

// failedErr reports whether a round-trip error counts towards passive
// outlier detection: a timeout or a connection lost mid-request, but not
// the client going away nor a GOAWAY.
func failedErr(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ga http2.GoAwayError
	return !errors.As(err, &ga)
}

// retryableError reports whether a failed round trip may be sent to
// another endpoint, and why: the apiserver never received it, or it is a
// read (GET, HEAD: kube-apiserver's get, list and watch change nothing)
// that failed on a broken connection or a timeout before any response
// header arrived, as on a host that died or was cut off mid-request.
// Writes that may have been processed never move, nor does any request
// through a proxy subresource: its backend is arbitrary code, to which a
// GET may be a write.
func retryableError(out *http.Request, st *reqState, unprocessed bool, err error) (reason string, ok bool) {
	switch {
	case unprocessed:
		return reasonUnprocessed, true
	case st.Upgrade:
		// The session may have begun: the client's connection may be
		// hijacked already.
		return "", false
	case isRead(out.Method) && st.Origin != reqinfo.OriginProxy && failedErr(out.Context(), err):
		return reasonRead, true
	}
	return "", false
}

// isRead reports whether method is one of kube-apiserver's reads (get,
// list, watch), which change nothing when sent twice.
func isRead(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// Reasons for fanout_retries_total and fanout_retry_budget_exhausted_total,
// besides reasonUnprocessed.
const (
	reasonRead      = "read"
	reasonShutdown  = "shutdown"
	reasonOverload  = "overload"
	reasonThrottled = "throttled"
	// reasonUnauthorized: sent again to the same endpoint after a 401 to
	// the client certificate, on renewed connections.
	reasonUnauthorized = "unauthorized"
)

// maxAttempts bounds the attempts of one request. A shutdown answer may
// move a request twice (two apiservers may be restarting at once during a
// fast rollout); every other reason moves it once, and a 401 sends it
// once more to the same endpoint.
const maxAttempts = 3

// retryBudget caps retries at Ratio of the requests seen over a sliding
// Window, plus Min per window, as Finagle's RetryBudget does: when every
// apiserver is saturated, fanout then adds at most that much load however
// many requests are rejected, and client-go's own retries take over.
//
// It counts in one-second buckets in a ring of atomics; a bucket is reset
// by the first writer of a new second with a compare-and-swap, and a count
// racing with that reset may be lost. The budget is approximate by design;
// the request path takes no lock.
type retryBudget struct {
	ratio   float64
	min     int64
	buckets []budgetBucket
}

type budgetBucket struct {
	sec      atomic.Int64
	requests atomic.Int64
	retries  atomic.Int64
}

func newRetryBudget(ratio float64, minPerWindow int, window time.Duration) *retryBudget {
	n := max(int(window/time.Second), 1)
	return &retryBudget{ratio: ratio, min: int64(minPerWindow), buckets: make([]budgetBucket, n)}
}

func (b *retryBudget) bucket(sec int64) *budgetBucket {
	bk := &b.buckets[sec%int64(len(b.buckets))]
	for {
		s := bk.sec.Load()
		if s >= sec {
			return bk
		}
		if bk.sec.CompareAndSwap(s, sec) {
			bk.requests.Store(0)
			bk.retries.Store(0)
			return bk
		}
	}
}

// request counts one request from a client.
func (b *retryBudget) request() { b.bucket(time.Now().Unix()).requests.Add(1) }

// allow reports whether one more retry fits in the budget, without
// spending it.
func (b *retryBudget) allow() bool {
	sec := time.Now().Unix()
	var requests, retries int64
	for i := range b.buckets {
		bk := &b.buckets[i]
		if s := bk.sec.Load(); s > sec-int64(len(b.buckets)) && s <= sec {
			requests += bk.requests.Load()
			retries += bk.retries.Load()
		}
	}
	return float64(retries) < float64(b.min)+b.ratio*float64(requests)
}

// spend counts one retry.
func (b *retryBudget) spend() { b.bucket(time.Now().Unix()).retries.Add(1) }

// doneInfo is what the balancer learns from an answer. A relayed answer
// (see origin) teaches it nothing but that the request ended.
func doneInfo(status int, v verdict, latency time.Duration, relayed bool) balancer.DoneInfo {
	return balancer.DoneInfo{
		StatusCode:      status,
		Latency:         latency,
		ShuttingDown:    v == verdictShutdown,
		Overloaded:      v == verdictOverload,
		DeadlineExpired: v == verdictTimeout,
		Failed:          !relayed && v == verdictAnswer && failedStatus(status),
		Relayed:         relayed,
	}
}

// retryReason names a verdict in the metrics.
func retryReason(v verdict) string {
	switch v {
	case verdictShutdown:
		return reasonShutdown
	case verdictOverload:
		return reasonOverload
	case verdictUnauthorized:
		return reasonUnauthorized
	default:
		return reasonThrottled
	}
}

// reasonSkew counts, in fanout_retries_total, requests sent again after
// an apiserver answered that it serves no such path: during an upgrade,
// apiservers of two releases serve different group/versions and
// resources (docs/resilience.md, "Version skew").
const reasonSkew = "skew"

// kube-apiserver's two "no such path" answers (k8s.io/apiserver v0.37.2).
// A path no handler claims ends in the NotFound handler of the last mux
// in its chain (kube-aggregator → apiextensions-apiserver → the core
// server): notfoundhandler.Handler, which, once every path is installed,
// calls http.NotFound. A path under a group/version that go-restful
// serves, but for a resource or subresource it does not, gets go-restful's
// 404, which server.serviceErrorHandler turns into
// apierrors.NewGenericServerResponse(404, "", GroupResource{}, "", msg,
// 0, false): a Status NotFound whose details name nothing and carry no
// cause. An object that does not exist is apierrors.NewNotFound: a Status
// NotFound whose details name its kind, and its message too.
const (
	noPathBody    = "404 page not found"
	noPathMessage = "the server could not find the requested resource"
)

// noSuchPath reports whether resp, a 404, is kube-apiserver saying it
// serves no such path, as opposed to no such object: such a request was
// never processed. It reads the (short) body and puts it back, as inspect
// does.
func noSuchPath(resp *http.Response) bool {
	if resp.StatusCode != http.StatusNotFound {
		return false
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxInspectBody+1))
	resp.Body = &rereadBody{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), c: resp.Body}
	if err != nil || len(buf) > maxInspectBody {
		return false
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		return string(buf) == noPathBody+"\n"
	}
	if kstatus.IsProtobuf(buf) {
		f, ok := kstatus.ProtobufStatusFields(buf)
		return ok && f.Code == http.StatusNotFound && f.Reason == kstatus.ReasonNotFound &&
			f.Message == noPathMessage && !f.NamesAnObject && f.Causes == 0
	}
	var st struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Code    int    `json:"code"`
		Details *struct {
			Name   string            `json:"name"`
			Group  string            `json:"group"`
			Kind   string            `json:"kind"`
			Causes []json.RawMessage `json:"causes"`
		} `json:"details"`
	}
	if json.Unmarshal(buf, &st) != nil {
		return false
	}
	return st.Kind == "Status" && st.Code == http.StatusNotFound && st.Reason == string(kstatus.ReasonNotFound) &&
		st.Message == noPathMessage &&
		(st.Details == nil || (st.Details.Name == "" && st.Details.Group == "" && st.Details.Kind == "" && len(st.Details.Causes) == 0))
}
