// Package reqinfo classifies a request to kube-apiserver: what
// kube-apiserver's WithRequestInfo learns of it, and what a client-side
// proxy needs besides (long-running or not, whose answer it is, whether it
// brings its own credentials). It is the vocabulary of a request read by
// kube-apiserver's own rules and knows nothing of the parts of fanout that
// use it: the listener calls New once per request, at its edge, and puts
// the Info in the request's context (WithRequest, request.go) for
// everything behind, as kube-apiserver's request.WithRequestInfo does; the
// proxy maps it to its balancer's and transport's terms and hangs its own
// state on it, and the watch features (package watch) read it without
// importing the proxy. The same Request is the request's one end (End):
// each part registers there what it must give back.
package reqinfo

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Info is what fanout learns of a request from its method, path, query and
// headers, before sending it anywhere. It is computed once per request (New)
// and read-only afterwards.
type Info struct {
	// LongRunning tells whether kube-apiserver treats the request as
	// long-running, by its path (see New); an upgrade's is its path's
	// too, Upgrade says the rest.
	LongRunning bool
	// Resource is a resource request (kube-apiserver's
	// IsResourceRequest): its Verb is one of the resource verbs. Any other
	// request's Verb is its lower-cased HTTP method.
	Resource bool
	// Origin says whose status the answer may carry.
	Origin Origin
	// Verb is kube-apiserver's verb for the request ("watch", "get",
	// "list", …), "" when it cannot parse the path.
	Verb string
	// Group, Version, APIResource and Subresource name what a resource
	// request is about, as kube-apiserver's RequestInfo does ("" for the core group
	// and for non-resource requests); Namespaced says the object lives in
	// a namespace (a namespace itself does not). They are substrings of
	// the path: whoever keeps one past the request must copy it.
	Group       string
	Version     string
	APIResource string
	Subresource string
	Namespaced  bool
	// OwnCredentials is a request that brings its own bearer token (an
	// Authorization header, or a WebSocket bearer subprotocol): it must
	// reach kube-apiserver with that token and no other identity.
	OwnCredentials bool
	// Upgrade is a request to switch protocols (exec, attach,
	// port-forward over SPDY or WebSocket) that needs its own HTTP/1.1
	// connection. An h2c offer is not one: see H2COffer.
	Upgrade bool
	// H2COffer is an HTTP/1.1 client offering to switch to h2c (curl
	// --http2 on http://). The offer is optional and fanout declines it:
	// the request is served as a plain one.
	H2COffer bool
}

// New classifies r from one parse of its path.
//
// Kind follows kube-apiserver's rule for long-running requests
// (pkg/controlplane/apiserver/config.go): the verbs watch and proxy, the
// subresources attach, exec, proxy, log and portforward, and
// /debug/pprof/. Every log request counts, follow or not, because the
// apiserver exempts them all from its request timeout. A path the
// apiserver cannot parse is Short: the apiserver rejects it quickly.
//
// Resource and Verb are the apiserver's: non-resource requests (discovery,
// /version, /openapi) and paths the apiserver cannot parse are not
// Resource.
func New(r *http.Request) Info {
	info := Info{OwnCredentials: bringsOwnCredentials(r)}
	if isUpgrade(r) {
		if strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), "h2c") {
			info.H2COffer = true
		} else {
			info.Upgrade = true
		}
	}
	// parse reads the path exactly like kube-apiserver's own
	// WithRequestInfo filter, so "is this a watch" is answered the way the
	// server that will serve it answers it (query decoding included).
	ri, ok := parse(r.Method, r.URL.Path, r.URL.RawQuery)
	// When the parse fails ri holds what was parsed before the failure,
	// the group included: an aggregated group's odd path is still its
	// server's.
	info.Origin = originOf(&ri, r.URL.Path)
	if !ok {
		return info
	}
	info.Verb = ri.Verb
	info.Resource = ri.IsResourceRequest
	if ri.IsResourceRequest {
		info.Group, info.Version, info.APIResource, info.Subresource = ri.APIGroup, ri.APIVersion, ri.Resource, ri.Subresource
		// The apiserver fills Namespace for namespaces/x too; the object
		// is cluster-scoped all the same.
		info.Namespaced = ri.Namespace != "" && ri.Resource != "namespaces"
	}
	info.LongRunning = isLongRunning(&ri)
	return info
}

// isLongRunning mirrors k8s.io/apiserver/pkg/server/filters.
// BasicLongRunningRequestCheck with kube-apiserver's verb and subresource
// sets. It is reimplemented because importing that package links about 700
// more packages (CEL, etcd client, OpenTelemetry, gRPC) into the sidecar;
// FuzzLongRunningMatchesApiserver keeps the two in agreement.
func isLongRunning(info *request) bool {
	switch info.Verb {
	case "watch", "proxy":
		return true
	}
	if info.IsResourceRequest {
		switch info.Subresource {
		case "attach", "exec", "proxy", "log", "portforward":
			return true
		}
		return false
	}
	return strings.HasPrefix(info.Path, "/debug/pprof/")
}

// wsBearerProtocolPrefix marks a WebSocket subprotocol that carries a bearer
// token (k8s.io/apiserver/pkg/authentication/request/websocket): browsers
// cannot set Authorization on a WebSocket, so clients smuggle it here.
const wsBearerProtocolPrefix = "base64url.bearer.authorization.k8s.io."

// bringsOwnCredentials reports whether r carries its own bearer token. Such
// a request must go out without the sidecar's client certificate:
// kube-apiserver tries the certificate first, so sending both would
// silently act as the sidecar instead of the caller.
func bringsOwnCredentials(r *http.Request) bool {
	// The keys are in canonical form (textproto.CanonicalMIMEHeaderKey)
	// and indexed directly: Header.Values would canonicalise
	// "Sec-WebSocket-Protocol" into a new string on every request.
	for _, v := range r.Header["Authorization"] {
		if strings.TrimSpace(v) != "" {
			return true
		}
	}
	for _, v := range r.Header["Sec-Websocket-Protocol"] {
		for p := range strings.SplitSeq(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(p), wsBearerProtocolPrefix) {
				return true
			}
		}
	}
	return false
}

// isUpgrade matches httputil.ReverseProxy's own test (a Connection token
// "Upgrade" and an Upgrade header naming a protocol), so everything the
// reverse proxy would try to upgrade is stopped before it does. Without an
// Upgrade header there is nothing to switch to: such a request is a plain
// one, and must not cost a dedicated HTTP/1.1 connection and its TLS
// handshake to an apiserver.
func isUpgrade(r *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") &&
		strings.TrimSpace(r.Header.Get("Upgrade")) != ""
}
