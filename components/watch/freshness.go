package watch

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
)

// Freshness requests: see docs/resilience.md, "Which watches, how many".
//
// A watch of a resource that sees no writes gets only bookmarks, and a
// bookmark carries the resourceVersion of the source apiserver's watch
// cache, which for a quiet resource moves only on etcd progress
// notifications: minutes behind the etcd revision. Such a watch never
// proves rule 3 (eligible) and stays where it is. kube-apiserver serves a
// LIST without resourceVersion from its watch cache once the cache is as
// fresh as etcd (ConsistentListFromCache), and gets there by asking etcd
// for a progress notification on the watch stream its caches share; the
// watch's next bookmark, about a minute later at most, then carries a
// resourceVersion that rule 3 accepts. So, for a watch blocked only as
// not caught up, the rebalancer sends the source apiserver one such LIST,
// as cheap as it gets (limit=1, the watch's own selection and
// credentials), once per resource, source and readiness of the targets.
// Rule 3 itself is only made stricter: the watch moves only once a
// bookmark proves it, and, once a freshness request was answered, only
// with a resourceVersion at least that answer's: the etcd revision after
// the targets' readiness, hence at least the one their watch caches
// started from, however little fanout had seen by then.

// Send sends req, built by the watch package, to endpoint with the
// credentials of the watch it was made for, and returns the answer. The
// proxy provides it (Hook.Track); nil sends nothing.
type Send func(req *http.Request, endpoint string) (*http.Response, error)

// Results of a freshness request, for fanout_watch_freshness_requests_total.
const (
	freshOK       = "ok"       // answered 200
	freshRejected = "rejected" // answered with another status (403, 429, ...)
	freshFailed   = "failed"   // no answer: connection, timeout
)

var freshResults = []string{freshOK, freshRejected, freshFailed}

// freshnessTimeout bounds one freshness request: kube-apiserver waits up
// to 3 s for its cache to catch up before it answers from etcd or 429.
const freshnessTimeout = 10 * time.Second

// freshnessDelayMargins is how many Margins after the latest target's
// readiness the first freshness request may go: after the one Margin
// that records the resourceVersion to beat, two more for the events of
// resources with writes to prove them caught up without any request.
const freshnessDelayMargins = 3

// freshnessAgent marks the request in the apiserver's audit log and
// metrics, after the client's own User-Agent.
const freshnessAgent = "fanout-watch-freshness"

// freshnessRequest returns the LIST that makes endpoint's watch cache of
// the resource of the watch sent as target and header fresh: its path
// (the legacy /watch/ prefix dropped) and selectors, resourceVersion
// unset, limit=1; its headers but for the encoding and agent. It reports
// false for a request it cannot turn into one (not a watch).
func freshnessRequest(ctx context.Context, target *url.URL, header http.Header, endpoint string) (*http.Request, bool) {
	u := *target
	u.Scheme, u.Host = "https", endpoint
	q := u.Query()
	switch q.Get("watch") {
	case "1", "true":
	default:
		// The legacy form, /api/v1/watch/namespaces/x/configmaps: the
		// first /watch/ segment is the verb (kube-apiserver's RequestInfo
		// reads it there), whatever the names after it.
		i := strings.Index(u.Path, "/watch/")
		if i < 0 {
			return nil, false
		}
		u.Path = u.Path[:i] + u.Path[i+len("/watch"):]
		u.RawPath = ""
	}
	for _, k := range []string{"watch", "resourceVersion", "resourceVersionMatch", "allowWatchBookmarks",
		"sendInitialEvents", "timeoutSeconds", "timeout", "continue", "limit"} {
		q.Del(k)
	}
	q.Set("limit", "1")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, false
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Del("Accept-Encoding") // the transport asks for gzip itself
	req.Header.Set("Accept", "application/json")
	agent := freshnessAgent
	if ua := header.Get("User-Agent"); ua != "" {
		agent = ua + " " + freshnessAgent
	}
	req.Header.Set("User-Agent", agent)
	return req, true
}

// freshKey names what one freshness request is for: a resource on a
// source endpoint.
type freshKey struct{ endpoint, resource string }

// requestFreshness sends, for each resource of a watch on endpoint that is
// blocked only as not caught up towards targets, one freshness request,
// unless one went for the same targets' readiness (epoch) already. The
// requests run on goroutines of their own; Stop waits for them.
func (r *Rebalancer) requestFreshness(endpoint string, targets []*readiness, now time.Time) {
	var epoch time.Time
	for _, t := range targets {
		if t == nil || !t.recorded {
			// The resourceVersion to beat is not known yet: a request now
			// could be too early to help.
			return
		}
		if t.since.After(epoch) {
			epoch = t.since
		}
	}
	if now.Before(epoch.Add(freshnessDelayMargins * r.cfg.Margin)) {
		// A resource with writes catches up by itself, LIST-free.
		return
	}
	for _, w := range r.set.on(endpoint) {
		if w.send == nil || w.resource == "" || eligible(w.view(), targets, now, r.cfg.MinAge, r.cfg.Margin) != blockedNotCaughtUp {
			continue
		}
		k := freshKey{endpoint, w.resource}
		if at, ok := r.asked[k]; ok && at.Equal(epoch) {
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, freshnessTimeout)
		req, ok := freshnessRequest(ctx, w.url, w.header, endpoint)
		if !ok {
			cancel()
			continue
		}
		r.asked[k] = epoch
		send := w.send
		r.wg.Go(func() {
			defer cancel()
			result, rv := freshnessResult(send(req, endpoint))
			r.freshness.WithLabelValues(result).Inc()
			for _, t := range targets {
				raiseUint(&t.floor, rv)
			}
		})
	}
}

// freshenOverloaded requests freshness (requestFreshness) from every
// usable endpoint holding more than its target share, not only the most
// loaded: each waits up to a minute for its bookmarks, and in turn would
// add those minutes up.
func (r *Rebalancer) freshenOverloaded(usable []balancer.WatchLoad, targets []float64, total int64, now time.Time) {
	for i, l := range usable {
		if float64(l.OpenLong) <= targets[i]*float64(total) {
			continue
		}
		dest := make([]*readiness, 0, len(usable)-1)
		for j, o := range usable {
			if j != i && targets[j] > 0 {
				dest = append(dest, r.ready[o.Address])
			}
		}
		r.requestFreshness(l.Address, dest, now)
	}
}

// freshnessResult reads and closes the answer, and says how it went and,
// for a 200, the list's resourceVersion (0 if it has none).
func freshnessResult(resp *http.Response, err error) (string, uint64) {
	if err != nil {
		return freshFailed, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return freshRejected, 0
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list) != nil {
		return freshOK, 0
	}
	rv, _ := strconv.ParseUint(list.Metadata.ResourceVersion, 10, 64)
	return freshOK, rv
}

// forgetFreshness drops what was asked of endpoints no longer usable: a
// source that comes back has a new watch cache.
func (r *Rebalancer) forgetFreshness() {
	for k := range r.asked {
		if r.ready[k.endpoint] == nil {
			delete(r.asked, k)
		}
	}
}
