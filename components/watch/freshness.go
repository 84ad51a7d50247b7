package watch

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
)

// Freshness requests: see docs/resilience.md, "Which watches, how many".
//
// A watch of a resource that sees no writes gets only bookmarks, and a
// bookmark carries the resourceVersion of the source apiserver's watch
// cache, which for a quiet resource moves only on etcd progress
// notifications: minutes behind the etcd revision. Such a watch holds a
// resourceVersion older than the watch cache of an apiserver that became
// ready since: it cannot move there (rule 3, eligible), and if its own
// apiserver goes (a roll takes the old replicas down one by one), its
// client re-watches from that resourceVersion, every newer apiserver
// answers 410 Gone, and the informer re-lists. kube-apiserver serves a
// LIST without resourceVersion from its watch cache once the cache is as
// fresh as etcd (ConsistentListFromCache), and gets there by asking etcd
// for a progress notification; the watch's next bookmark, a minute later
// at most, then carries a current resourceVersion. So, as soon as the
// readiness of the endpoints a watch could go to is recorded (Margin after
// the latest one became usable), the rebalancer sends the apiserver each
// watch not caught up with them is on one such LIST, as cheap as it gets
// (limit=1, the watch's own selection and credentials): once per source,
// resource and readiness of the targets, whether or not the loads call
// for a move. A roll that waits a minute after each new replica's
// readiness (minReadySeconds) then takes no old replica down before its
// quiet watches hold a resourceVersion the new ones serve. Rule 3 itself
// is only made stricter: a watch moves only once a bookmark proves it,
// and, once a freshness request was answered, only with a resourceVersion
// at least that answer's: the etcd revision after the targets' readiness,
// hence at least the one their watch caches started from, however little
// fanout had seen by then.

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

// requestFreshness sends, for each resource of a watch on endpoint past
// its initial events and not caught up with targets, one freshness
// request, unless one went for the same targets' readiness (epoch)
// already. The requests run on goroutines of their own; Stop waits for
// them.
func (r *Rebalancer) requestFreshness(endpoint string, targets []*readiness) {
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
	for _, w := range r.set.on(endpoint) {
		if w.send == nil || w.resource == "" {
			continue
		}
		// A WatchList still streaming has no resourceVersion to judge;
		// the next tick after its closing bookmark does.
		if v := w.view(); !v.initialDone || caughtUp(v, targets, r.cfg.Margin) {
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
				lowerFloor(&t.floor, rv)
			}
		})
	}
}

// freshen requests freshness (requestFreshness) from every usable
// endpoint for its watches towards all the others that the placement
// sends watches to: the ones its clients re-watch on when it goes, and
// the ones the rebalancer moves its watches to.
func (r *Rebalancer) freshen(usable []balancer.WatchLoad, targets []float64) {
	for i, l := range usable {
		dest := make([]*readiness, 0, len(usable)-1)
		for j, o := range usable {
			if j != i && targets[j] > 0 {
				dest = append(dest, r.ready[o.Address])
			}
		}
		r.requestFreshness(l.Address, dest)
	}
}

// lowerFloor records rv, a freshness answer's resourceVersion, in floor
// unless floor holds a lower one already. Every answer came after the
// target's readiness was recorded, so the lowest already bounds the
// revision its watch caches started from; a higher one would hold back a
// quiet watch whose own answer, hence its next bookmark, came lower, until
// etcd's next progress notification minutes later.
func lowerFloor(floor *atomic.Uint64, rv uint64) {
	if rv == 0 {
		return
	}
	for {
		old := floor.Load()
		if (old != 0 && old <= rv) || floor.CompareAndSwap(old, rv) {
			return
		}
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
