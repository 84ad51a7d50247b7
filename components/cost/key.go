package cost

import (
	"strings"

	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Key is one row of the table. Namespaces and names are never part of it:
// they would make the table as large as the cluster. Its JSON is spelled
// as a row's in /debug/cost.
type Key struct {
	// Component is the client program, "program/controller" when its
	// User-Agent names a controller (component), "unknown" when the
	// User-Agent is missing or unusable, "other" for the evicted fold.
	Component string `json:"component"`
	// Verb is kube-apiserver's verb, or the lower-cased method of a
	// non-resource request.
	Verb        string `json:"verb"`
	Group       string `json:"group"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	// Scope is ScopeNamespaced, ScopeCluster, or "" for a non-resource
	// request.
	Scope string `json:"scope"`
}

// Scopes of a Key.
const (
	ScopeNamespaced = "namespaced"
	ScopeCluster    = "cluster"
)

// Names the table gives itself.
const (
	// Unknown stands for a value that is missing or fails the check of
	// its field (charset, length): clients choose these strings.
	Unknown = "unknown"
	// Other is the component of the row evicted keys fold into.
	Other = "other"
)

// Limits of a Key's fields. A resource or subresource is a DNS label
// (CRD plural names are), a group a DNS subdomain; a component part is a
// program or controller name.
const (
	maxLabel     = 63
	maxGroup     = 253
	maxVerb      = 20
	maxComponent = 64 // each of program and controller
)

// keyOf builds the key of a request classified as info from component
// (already checked). The strings are info's: substrings of the request's
// path, copied only when the key enters the table (Key.clone).
func keyOf(info *reqinfo.Info, component string) Key {
	k := Key{Component: component, Verb: checked(info.Verb, maxVerb, isVerbByte)}
	if !info.Resource {
		return k
	}
	k.Group = checked(info.Group, maxGroup, isNameByte)
	k.Resource = checked(info.APIResource, maxLabel, isNameByte)
	k.Subresource = checked(info.Subresource, maxLabel, isNameByte)
	k.Scope = ScopeCluster
	if info.Namespaced {
		k.Scope = ScopeNamespaced
	}
	return k
}

// clone copies k's strings so that the table does not keep a request's
// path alive.
func (k Key) clone() Key {
	return Key{
		Component:   strings.Clone(k.Component),
		Verb:        strings.Clone(k.Verb),
		Group:       strings.Clone(k.Group),
		Resource:    strings.Clone(k.Resource),
		Subresource: strings.Clone(k.Subresource),
		Scope:       k.Scope, // a constant
	}
}

// checked is s when every byte passes ok and s is at most max bytes long,
// else Unknown. An empty s stays empty (the core group, no subresource).
func checked(s string, max int, ok func(byte) bool) string {
	if len(s) > max {
		return Unknown
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return Unknown
		}
	}
	return s
}

// isNameByte: DNS names, lower case (resources, groups, subresources).
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.'
}

func isVerbByte(c byte) bool { return 'a' <= c && c <= 'z' }

// isComponentByte: program and controller names.
func isComponentByte(c byte) bool {
	return isNameByte(c) || 'A' <= c && c <= 'Z' || c == '_'
}

// serviceAccountPrefix starts the controller name kube-controller-manager
// gives a controller's client with --use-service-account-credentials
// (clientbuilder: rest.AddUserAgent(cfg, "system:serviceaccount:<ns>:<name>")).
const serviceAccountPrefix = "system:serviceaccount:"

// component reads the component from a User-Agent. client-go's default is
// "program/version (os/arch) kubernetes/commit"; rest.AddUserAgent appends
// "/name", which kube-controller-manager sets to the controller's name, or
// with --use-service-account-credentials to its service account
// (system:serviceaccount:kube-system:replicaset-controller), of which the
// controller's name is kept. Any other User-Agent counts by the program
// before its first "/" or space (curl/8.5.0 is curl). The result is
// "program" or "program/controller", or Unknown when either part is empty
// where it is expected, too long, or has a byte outside [A-Za-z0-9._-].
func component(ua string) string {
	end := strings.IndexAny(ua, "/ ")
	if end < 0 {
		end = len(ua)
	}
	program := ua[:end]
	if program == "" || program == Other || checked(program, maxComponent, isComponentByte) == Unknown {
		return Unknown
	}
	_, rest, ok := strings.Cut(ua, ") kubernetes/")
	if !ok {
		return program
	}
	_, name, ok := strings.Cut(rest, "/")
	if !ok {
		return program
	}
	if sa, ok := strings.CutPrefix(name, serviceAccountPrefix); ok {
		// namespace:name
		_, name, _ = strings.Cut(sa, ":")
	}
	if name == "" || checked(name, maxComponent, isComponentByte) == Unknown {
		return Unknown
	}
	return program + "/" + name
}
