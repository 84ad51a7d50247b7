package reqinfo

import "strings"

// Origin says who may have written the status of a request's answer:
// kube-apiserver itself, or a server it relays the request to. Only
// kube-apiserver's own answers say anything about kube-apiserver, so only
// they may move a request that was not provably left unprocessed, drain or
// penalise an endpoint, or make the transport re-read credentials.
//
// A relayed answer cannot be told from the apiserver's own by its bytes:
// a backend behind services/x/proxy can write the shutdown 429 or 503
// verbatim, and an aggregated apiserver is built on k8s.io/apiserver and
// writes the very same shutdown and APF rejections, headers included.
// So the origin is decided from the request alone.
type Origin uint8

const (
	// OriginAPIServer: kube-apiserver answers from its own storage.
	OriginAPIServer Origin = iota
	// OriginNode: pods/{name}/log, exec, attach, portforward. kube-apiserver
	// streams from the kubelet and turns the kubelet's error statuses
	// (401, 429, 5xx) into its own Status with the same code.
	OriginNode
	// OriginProxy: pods|services|nodes/{name}/proxy/..., and the
	// deprecated /api/v1/proxy/... verb. The backend's answer passes
	// through unchanged, and the backend is arbitrary code: even a GET may
	// change something there.
	OriginProxy
	// OriginAggregated: a group that kube-apiserver does not serve from its
	// own storage (see ownGroups), which may be an APIService's.
	OriginAggregated
)

// Relayed reports whether the answer's status may be another server's.
func (o Origin) Relayed() bool { return o != OriginAPIServer }

func (o Origin) String() string {
	switch o {
	case OriginNode:
		return "node"
	case OriginProxy:
		return "proxy"
	case OriginAggregated:
		return "aggregated"
	default:
		return "apiserver"
	}
}

// ownGroups are the API groups kube-apiserver v1.37 serves from its own
// storage with a version enabled by default: the groups of k8s.io/api with
// a GA or beta version that the control plane registers
// (pkg/controlplane/apiserver and pkg/controlplane's storage providers),
// plus apiextensions.k8s.io and apiregistration.k8s.io, which it serves
// in-process. Deliberately left out:
//   - groups with only alpha versions (lifecycle.k8s.io,
//     internal.apiserver.k8s.io): disabled by default, so an APIService
//     may claim them;
//   - groups kube-apiserver never serves (admission.k8s.io,
//     imagepolicy.k8s.io, apidiscovery.k8s.io, extensions).
//
// Every other group is taken as possibly aggregated. That includes
// CustomResourceDefinitions' groups, which kube-apiserver does serve
// itself: nothing a client may read tells them from an APIService's (the
// APIService list needs RBAC that client identities don't have, and
// discovery does not say which server serves a group), and mistaking an
// aggregated group for an own one replays writes, while the converse only
// leaves a shutdown or APF rejection for client-go to retry after its
// Retry-After (docs/resilience.md). TestOwnGroupsAreLocalAPIServices (e2e)
// checks the set against a real kube-apiserver's APIService objects.
var ownGroups = map[string]struct{}{
	"admissionregistration.k8s.io": {},
	"apiextensions.k8s.io":         {},
	"apiregistration.k8s.io":       {},
	"apps":                         {},
	"authentication.k8s.io":        {},
	"authorization.k8s.io":         {},
	"autoscaling":                  {},
	"batch":                        {},
	"certificates.k8s.io":          {},
	"coordination.k8s.io":          {},
	"discovery.k8s.io":             {},
	"events.k8s.io":                {},
	"flowcontrol.apiserver.k8s.io": {},
	"networking.k8s.io":            {},
	"node.k8s.io":                  {},
	"policy":                       {},
	"rbac.authorization.k8s.io":    {},
	"resource.k8s.io":              {},
	"scheduling.k8s.io":            {},
	"storage.k8s.io":               {},
	"storagemigration.k8s.io":      {},
}

// OwnGroups returns the API groups fanout takes as served by kube-apiserver
// itself (see ownGroups); every other group under /apis is treated as
// possibly aggregated. For tests and documentation.
func OwnGroups() []string {
	out := make([]string, 0, len(ownGroups))
	for g := range ownGroups {
		out = append(out, g)
	}
	return out
}

// originOf tells the origin of the answer to the request info describes,
// path being its URL path.
func originOf(info *request, path string) Origin {
	if info.IsResourceRequest {
		switch {
		case info.Verb == "proxy" || info.Subresource == "proxy":
			return OriginProxy
		case info.APIPrefix == "apis" && !isOwnGroup(info.APIGroup):
			return OriginAggregated
		case info.APIGroup == "" && info.Resource == "pods":
			switch info.Subresource {
			case "log", "exec", "attach", "portforward":
				return OriginNode
			}
		}
		return OriginAPIServer
	}
	// /apis/{group}/{version} and below is proxied to an aggregated
	// server whole, its discovery document included; /apis and
	// /apis/{group} are kube-apiserver's own (kube-aggregator serves the
	// group's document from the APIService objects).
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return OriginAPIServer
	}
	group, version, _ := strings.Cut(rest, "/")
	version, _, _ = strings.Cut(version, "/")
	if group == "" || version == "" || isOwnGroup(group) {
		return OriginAPIServer
	}
	return OriginAggregated
}

func isOwnGroup(g string) bool {
	_, ok := ownGroups[g]
	return ok
}
