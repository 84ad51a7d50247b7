package components

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"strings"

	"k8s.io/klog/v2"
)

// routeKlog sends what apimachinery and apiserver log through klog (the
// request-info parser, the upgrade proxy: the request path, the last user
// of Kubernetes libraries in the sidecar) to fanout's own logger, so every line has fanout's format and level and none goes
// to stderr unstructured. klog's verbose levels map to slog levels below
// Info, so they show only with -v. Credentials are redacted on the way
// (redactHandler).
func routeKlog(log *slog.Logger) { klog.SetSlogLogger(slog.New(redactHandler{log.Handler()})) }

// redactHandler removes credentials from what the libraries log before
// the next handler sees it. apimachinery's UpgradeAwareHandler logs the
// headers of the upgrade request it sends upstream at V(6): Authorization
// (fanout's own token in sidecar mode, the client's in passthrough) and a
// WebSocket client's bearer token in Sec-WebSocket-Protocol. fanout's own
// code never logs credentials; only the klog route needs this.
type redactHandler struct{ next slog.Handler }

var _ slog.Handler = redactHandler{}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, redactString(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = redactAttr(a)
	}
	return redactHandler{h.next.WithAttrs(red)}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.next.WithGroup(name)}
}

const redacted = "[redacted]"

// wsBearerPrefix starts the WebSocket subprotocol that carries a bearer
// token (k8s.io/apiserver's wsstream authenticator).
const wsBearerPrefix = "base64url.bearer.authorization.k8s.io."

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redactString(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = redactAttr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case http.Header:
			return slog.Any(a.Key, redactHeader(x))
		case map[string][]string:
			return slog.Any(a.Key, map[string][]string(redactHeader(x)))
		case error:
			return slog.String(a.Key, redactString(x.Error()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// redactHeader returns a copy of h with credential values replaced.
func redactHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		switch {
		case strings.EqualFold(k, "Authorization"), strings.EqualFold(k, "Proxy-Authorization"),
			strings.EqualFold(k, "Cookie"), strings.EqualFold(k, "Set-Cookie"):
			vs = []string{redacted}
		case strings.EqualFold(k, "Sec-WebSocket-Protocol"):
			red := make([]string, len(vs))
			for i, v := range vs {
				red[i] = redactString(v)
			}
			vs = red
		default:
			vs = append([]string(nil), vs...)
		}
		out[k] = vs
	}
	return out
}

// secretPattern matches a bearer token, after "Bearer " or in the
// WebSocket subprotocol, wherever a library formats one into text.
var secretPattern = regexp.MustCompile(`(?i)(bearer\s+|` + regexp.QuoteMeta(wsBearerPrefix) + `)[^\s,"'\]]+`)

func redactString(s string) string {
	if !strings.Contains(strings.ToLower(s), "bearer") {
		return s
	}
	return secretPattern.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(strings.ToLower(m), wsBearerPrefix) {
			return wsBearerPrefix + redacted
		}
		return redacted
	})
}
