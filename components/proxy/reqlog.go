package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/logging"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Per-request debugging: one log line per request when it ends, at
// logging.LevelRequest (-v 4), and, with Config.EndpointHeader, response
// headers naming the apiserver that answered. Both read the reqState the
// attempt loop fills in (the endpoint, the attempts) and the way a
// long-running answer ended (endReason). The line is built only when its
// level is on: at the default verbosity a request pays one Enabled call.

// Response headers of Config.EndpointHeader.
const (
	// EndpointHeader names the apiserver (host:port) whose answer the
	// client got, or, on fanout's own error answer, the last one tried.
	EndpointHeader = "X-Fanout-Endpoint"
	// AttemptsHeader is how many times the request was sent: 2 after one
	// retry.
	AttemptsHeader = "X-Fanout-Attempts"
)

// endReason is how a long-running answer's body ended, recorded by its
// doneBody for the log line.
type endReason uint32

const (
	endUnknown endReason = iota
	// endAPIServer: the apiserver ended the stream (its timeoutSeconds ran
	// out, or it closed the watch).
	endAPIServer
	// endClient: the client closed the request or stopped reading.
	endClient
	// endRebalanced: the watch rebalancer ended it between two events.
	endRebalanced
	// endShutdown: fanout is shutting down (StopLongRunning).
	endShutdown
	// endError: the upstream stream broke.
	endError
)

func (r endReason) String() string {
	switch r {
	case endAPIServer:
		return "apiserver"
	case endClient:
		return "client"
	case endRebalanced:
		return "rebalanced"
	case endShutdown:
		return "shutdown"
	case endError:
		return "error"
	}
	return ""
}

// logsRequests reports whether the line per request is on: the one check
// on the request path when it is off.
func (h *Handler) logsRequests() bool {
	return h.log.Enabled(context.Background(), logging.LevelRequest)
}

// logEnded writes the line of a request that has ended: the one place it
// is written. method and u are the client's request's, ua its User-Agent.
func (h *Handler) logEnded(method string, u *url.URL, ua string, st *reqState) {
	if !h.logsRequests() {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("method", method),
		slog.String("path", u.Path),
	)
	if q := loggedQuery(u.RawQuery, st.Origin); q != "" {
		attrs = append(attrs, slog.String("query", q))
	}
	if st.Verb != "" {
		attrs = append(attrs, slog.String("verb", st.Verb))
	}
	attrs = append(attrs,
		slog.String("user_agent", ua),
		slog.String("endpoint", st.endpoint),
		slog.Int("status", st.outcome.Code),
		slog.Int("attempts", int(st.attempts)),
		slog.Duration("duration", time.Since(st.Start)),
	)
	if st.Kind == balancer.Long && !st.Upgrade {
		if r := endReason(st.end.Load()); r != endUnknown {
			attrs = append(attrs, slog.String("end", r.String()))
		}
	}
	h.log.LogAttrs(context.Background(), logging.LevelRequest, "request", attrs...)
}

// loggedQueryKeys are the query parameters the line per request shows:
// kube-apiserver's list and watch options, which say what a request read
// and are no secret. Everything else is left out, because a query may
// carry one: exec's and attach's command= (a shell line with a token in
// it), and whatever a backend behind a proxy subresource reads from its
// query. kube-apiserver's own line per request (httplog, -v 3) logs the
// whole URI; fanout, which often runs beside a single client at a
// verbosity set for debugging, logs only what it can name as harmless.
// continue= is left out too: an opaque, long cursor that names an object.
var loggedQueryKeys = map[string]bool{
	"labelSelector": true, "fieldSelector": true,
	"resourceVersion": true, "resourceVersionMatch": true,
	"watch": true, "allowWatchBookmarks": true, "sendInitialEvents": true,
	"timeoutSeconds": true, "timeout": true, "limit": true,
}

// loggedQuery is the part of the raw query the line per request shows
// (loggedQueryKeys, still escaped, in the client's order): none for a
// request relayed through a proxy subresource, whose query is its
// backend's.
func loggedQuery(raw string, origin reqinfo.Origin) string {
	if raw == "" || origin == reqinfo.OriginProxy {
		return ""
	}
	var b strings.Builder
	for pair := range strings.SplitSeq(raw, "&") {
		key, _, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(key); err != nil || !loggedQueryKeys[k] {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(pair)
	}
	return b.String()
}

// setEndpointHeaders names, on the answer's header, the endpoint and the
// attempts of the request in st (Config.EndpointHeader).
func setEndpointHeaders(header http.Header, st *reqState) {
	if st.endpoint == "" {
		return // no endpoint was tried
	}
	header[EndpointHeader] = []string{st.endpoint}
	header[AttemptsHeader] = []string{strconv.Itoa(int(st.attempts))}
}
