package proxy

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
)

// requestInfoFactory parses paths exactly like kube-apiserver's own
// WithRequestInfo filter, so "is this a watch" is answered the way the server
// that will serve it answers it (query decoding included).
var requestInfoFactory = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// Classify tells whether kube-apiserver treats r as a long-running request.
//
// The rule is kube-apiserver's (pkg/controlplane/apiserver/config.go):
// the verbs watch and proxy, the subresources attach, exec, proxy, log and
// portforward, and /debug/pprof/. Every log request counts, follow or not,
// because the apiserver exempts them all from its request timeout.
// A path the apiserver cannot parse is Short: the apiserver rejects it
// quickly.
func Classify(r *http.Request) balancer.Kind {
	kind, _ := ClassifyRequest(r)
	return kind
}

// ClassifyRequest returns Classify's kind and the request's class, from one
// parse of the path. The class is the verb of a resource request (get,
// list, create, …; see balancer.ClassForVerb), for the balancer to compare
// a LIST's latency with LISTs' rather than with GETs'. Non-resource
// requests (discovery, /version, /openapi) and paths the apiserver cannot
// parse are balancer.ClassOther.
func ClassifyRequest(r *http.Request) (balancer.Kind, balancer.Class) {
	kind, class, _ := classifyRequest(r)
	return kind, class
}

// classifyRequest is ClassifyRequest plus the origin of the answer (see
// origin), from the same parse.
func classifyRequest(r *http.Request) (balancer.Kind, balancer.Class, origin) {
	info, err := requestInfoFactory.NewRequestInfo(r)
	// On error info holds what was parsed before the failure, the group
	// included: an aggregated group's odd path is still its server's.
	org := originOf(info, r.URL.Path)
	if err != nil {
		return balancer.Short, balancer.ClassOther, org
	}
	class := balancer.ClassOther
	if info.IsResourceRequest {
		class = balancer.ClassForVerb(info.Verb)
	}
	if isLongRunning(info) {
		return balancer.Long, class, org
	}
	return balancer.Short, class, org
}

// isLongRunning mirrors k8s.io/apiserver/pkg/server/filters.
// BasicLongRunningRequestCheck with kube-apiserver's verb and subresource
// sets. It is reimplemented because importing that package links about 700
// more packages (CEL, etcd client, OpenTelemetry, gRPC) into the sidecar;
// FuzzLongRunningMatchesApiserver keeps the two in agreement.
func isLongRunning(info *apirequest.RequestInfo) bool {
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

// AuthModeFor tells which credentials r must be sent with. A request that
// brings its own bearer token goes out without the sidecar's client
// certificate: kube-apiserver tries the certificate first, so sending both
// would silently act as the sidecar instead of the caller.
func AuthModeFor(r *http.Request) transport.AuthMode {
	for _, v := range r.Header.Values("Authorization") {
		if strings.TrimSpace(v) != "" {
			return transport.AuthPassthrough
		}
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(p), wsBearerProtocolPrefix) {
				return transport.AuthPassthrough
			}
		}
	}
	return transport.AuthSidecar
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
