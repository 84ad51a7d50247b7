package proxy

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
)

// The attempt policy: every request that fanout may send more than once
// (a plain one, an upgrade, a watch moved after a 410) goes through one
// loop, pick → send → inspect → done or retry, and one retry budget, as
// in Caddy's reverse proxy. What differs between them is only how an
// attempt is sent (attempts.send) and what may follow it; every retry
// decision is made here, from the verdict on an answer (inspect) or from
// the typed errors the transport returns (transport.UnprocessedError,
// retryableError). The transport never resends on its own: after a 401 it
// only renews the endpoint's connections, and this loop decides whether
// the request goes again.

// attempts carries one request through the attempt policy. It is used by
// the request's goroutine only.
type attempts struct {
	h   *Handler
	out *http.Request // the request as sent
	st  *reqState
	// body is the request body as each attempt sends it. An upgrade's is
	// empty and replayable: the client streams its input only once the
	// apiserver has switched protocols.
	body outBody
	// upgrade, when set, sends the attempts of an upgrade request: each
	// runs the whole session, and its answer is already the client's, so
	// it is not inspected and never retried.
	upgrade *upgradeSession

	pick     balancer.PickInfo // the next pick's
	n        int               // attempts made
	max      int               // attempts allowed
	retrying string            // why the next pick is a retry; "" for the first attempt
	first    *upstreamError    // the failure that caused the retry, if any
	// held is an overload rejection kept while looking for a less loaded
	// endpoint, or a 401 kept while the request is sent again: the client
	// gets it unchanged if the next pick finds no endpoint.
	held     *http.Response
	heldAddr string
	// renewed says a 401 already renewed connections for this request:
	// it is sent again after one 401 only.
	renewed bool
}

// answer is the attempt whose response the client gets.
type answer struct {
	resp *http.Response
	addr string
	// pick is the attempt's, to report done with info once the response
	// has ended. It is the zero Pick when the balancer already heard of
	// it (a held overload rejection).
	pick    balancer.Pick
	info    balancer.DoneInfo
	headers time.Time // when the response headers arrived
}

// newAttempts starts the policy for a request classified as st. Every
// request counts towards the retry budget.
func (h *Handler) newAttempts(out *http.Request, st *reqState, body outBody) attempts {
	h.budget.request()
	a := attempts{
		h: h, out: out, st: st, body: body,
		pick: balancer.PickInfo{Kind: st.Kind, Class: st.Class},
		max:  maxAttempts,
	}
	if st.Resource {
		// Version skew: the pick keeps to endpoints that serve it.
		a.pick.API = balancer.API{Group: st.Group, Version: st.Version, Resource: st.APIResource, Subresource: st.Subresource}
	}
	return a
}

// send makes one attempt on the endpoint at addr: the upstream round trip,
// or an upgrade's session.
func (a *attempts) send(addr string) (*http.Response, error) {
	if a.upgrade != nil {
		return a.upgrade.send(addr)
	}
	return a.h.upstream.For(addr, a.st.Mode).RoundTrip(a.body.request(a.out, addr, a.st))
}

// mayRetry reports whether the request may be sent once more for reason,
// counting a retry the budget refuses.
func (a *attempts) mayRetry(reason string) bool {
	if a.n >= a.max || !a.body.replayable || a.out.Context().Err() != nil {
		return false
	}
	if !a.h.budget.allow() {
		a.h.metrics.budgetExhausted(reason)
		return false
	}
	return true
}

// retry makes the next pick a retry for reason, away from addr. The
// budget is spent and the retry counted only once a pick finds an
// endpoint.
func (a *attempts) retry(reason, addr string) {
	a.retrying = reason
	a.pick.Avoid = addr
}

// resendTo makes the next pick a retry for reason on addr itself.
func (a *attempts) resendTo(reason, addr string) {
	a.retrying = reason
	a.pick.Only, a.pick.Avoid, a.pick.Unloaded = addr, "", false
}

// renew reports whether resp, kube-apiserver's own 401 to the request,
// may be answered by sending the request again: only once per request,
// only for a request sent with the sidecar's credentials, and only if the
// transport renewed the connections the 401 came on (it re-reads the
// credentials whether or not the request is sent again).
func (a *attempts) renew(resp *http.Response) bool {
	if a.renewed || a.st.Mode != transport.AuthSidecar {
		return false
	}
	a.renewed = true
	return transport.RenewAfterUnauthorized(resp)
}

// run is the loop. It returns the answer to pass on, or the error that
// ends the request: a *pickError, or the *upstreamError of the last
// attempt (naming the first failure if it was retried).
func (a *attempts) run() (answer, error) {
	h, st := a.h, a.st
	for {
		pick, err := h.picker.Pick(a.pick)
		if err != nil {
			switch {
			case a.held != nil:
				return answer{resp: a.held, addr: a.heldAddr, headers: time.Now()}, nil
			case a.first != nil:
				// The retry found nothing; the first failure is the story.
				return answer{}, a.first
			}
			return answer{}, &pickError{err: err}
		}
		a.pick.Only, a.pick.Served = "", false
		if a.held != nil {
			// An unloaded endpoint exists, or the 401's endpoint is still
			// there: send the request there. Reading a little of the held
			// answer first lets its stream end without a reset.
			_, _ = io.Copy(io.Discard, io.LimitReader(a.held.Body, 4<<10))
			_ = a.held.Body.Close()
			a.held = nil
		}
		if a.retrying != "" {
			h.budget.spend()
			h.metrics.retried(a.retrying)
			st.outcome.Retries++
			a.retrying = ""
		}
		a.n++
		st.attempts++
		addr := pick.Endpoint.Address()
		st.endpoint = addr

		sent := time.Now()
		resp, err := a.send(addr)
		if err == nil {
			headers := time.Now()
			v := verdictAnswer
			if !st.Origin.Relayed() && a.upgrade == nil {
				// Only kube-apiserver's own rejections are verdicts; a
				// relayed answer is passed on whatever it says.
				v, _ = inspect(resp)
				if v == verdictAnswer && pastOwnDeadline(a.out.URL, resp.StatusCode, headers.Sub(sent)) {
					v = verdictTimeout
				}
			}
			info := doneInfo(resp.StatusCode, v, headers.Sub(sent), st.Origin.Relayed())
			if a.upgrade != nil {
				// An upgrade's status is the apiserver's verdict on the
				// session (often the kubelet's), not on its own health.
				info.Failed = false
			}
			if v == verdictAnswer && a.n == 1 && a.upgrade == nil && !st.Origin.Relayed() && st.Resource &&
				noSuchPath(resp) && a.mayRetry(reasonSkew) {
				// Never processed: any verb may go again, but only to an
				// endpoint that serves the path; if none does, the client
				// gets this 404 (held).
				pick.Done(info)
				a.retry(reasonSkew, addr)
				a.pick.Served = true
				a.held, a.heldAddr = resp, addr
				continue
			}
			reason := retryReason(v)
			if v == verdictUnauthorized {
				if a.renew(resp) && a.mayRetry(reason) {
					pick.Done(info)
					a.resendTo(reason, addr)
					a.held, a.heldAddr = resp, addr
					continue
				}
				v = verdictAnswer
			}
			if v != verdictAnswer && v != verdictTimeout && (v == verdictShutdown || a.n == 1) &&
				(v != verdictThrottled || isRead(a.out.Method)) && a.mayRetry(reason) {
				pick.Done(info)
				a.retry(reason, addr)
				a.pick.Unloaded = v == verdictOverload
				if v == verdictOverload {
					// Retried only if the next pick finds an endpoint
					// that is not overloaded too.
					a.held, a.heldAddr = resp, addr
				} else {
					_ = resp.Body.Close()
				}
				continue
			}
			return answer{resp: resp, addr: addr, pick: pick, info: info, headers: headers}, nil
		}

		unprocessed := transport.IsUnprocessed(err)
		relayed := st.Origin.Relayed()
		// A relayed request's stream may break because its backend did:
		// it is no failure of the endpoint's (DoneInfo.Relayed).
		pick.Done(balancer.DoneInfo{Err: err, Unavailable: connectFailed(err),
			Failed: !relayed && a.upgrade == nil && !unprocessed && failedErr(a.out.Context(), err), Relayed: relayed})
		h.metrics.upstreamError(addr, err)
		uerr := &upstreamError{endpoint: addr, err: err, first: a.first}
		// Once only: when two apiservers in a row never received the
		// request, the cause is more likely ours (network, credentials)
		// than theirs, and more attempts would only delay the error.
		reason, safe := retryableError(a.out, st, unprocessed, err)
		if a.first != nil || !safe || !a.mayRetry(reason) {
			return answer{}, uerr
		}
		a.first = uerr
		a.retry(reason, addr)
		// A read whose connection broke is worth retrying only on another
		// endpoint; if the balancer has nothing but addr left for an
		// unprocessed request it returns addr again, and the apiserver
		// never saw the request, so a second try is safe.
		a.pick.Unloaded = reason == reasonRead
	}
}

// reasonGone counts, in fanout_retries_total, watches moved after a 410.
const reasonGone = "gone"

// errNoOlder says there is no other endpoint to retry a 410 on.
var errNoOlder = errors.New("no other endpoint to retry the watch on")

// retryGone is the watch.Resend of a watch that endpoint from answered
// with a 410: one more attempt of the request, on the oldest other usable
// endpoint, through the attempt policy and its budget. The response it
// returns reports to the balancer when it ends, like any other.
func (a *attempts) retryGone(from string) (*http.Response, string, error) {
	a.max = a.n + 1
	if !a.mayRetry(reasonGone) {
		return nil, "", errNoOlder
	}
	a.retry(reasonGone, from)
	a.pick.Oldest, a.pick.Unloaded = true, true
	ans, err := a.run()
	if err != nil {
		return nil, "", err
	}
	if ans.resp.StatusCode != http.StatusOK {
		_ = ans.resp.Body.Close()
		ans.pick.Done(ans.info)
		return nil, "", errNoOlder
	}
	ans.resp.Body = a.h.watchBody(nil, ans.resp.Body, a.st, ans.pick, ans.info)
	forgetRequest(ans.resp)
	return ans.resp, ans.addr, nil
}
