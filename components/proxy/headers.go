package proxy

import (
	"net/http"
	"strings"
)

// Request headers with which an authenticating front proxy tells
// kube-apiserver who the user is (--requestheader-username-headers,
// -group-headers, -extra-headers-prefix, -uid-headers; these are the names
// kubeadm and most installers configure). kube-apiserver believes them
// only from a client certificate signed by its --requestheader-client-ca
// file and named in --requestheader-allowed-names. fanout sends the
// client's certificate: where that certificate happens to qualify (a
// shared CA, an empty allowed-names list), any local process could claim
// any user by setting these headers. fanout is not a front proxy and
// asserts no identity of its own, so it forwards none of them.
//
// Impersonate-* headers are different and pass through: kube-apiserver
// authorizes impersonation against the authenticated user (the client's),
// so they grant nothing the client's RBAC does not.
const (
	remoteUserHeader        = "X-Remote-User"
	remoteGroupHeader       = "X-Remote-Group"
	remoteUIDHeader         = "X-Remote-Uid"
	remoteExtraHeaderPrefix = "X-Remote-Extra-"
)

// stripIdentityHeaders deletes the front-proxy identity headers from h.
// Keys are compared case-insensitively: net/http canonicalises the keys it
// parses, but a key set through the map directly need not be.
func stripIdentityHeaders(h http.Header) {
	for k := range h {
		if isIdentityHeader(k) {
			delete(h, k)
		}
	}
}

func isIdentityHeader(k string) bool {
	if len(k) < len("X-Remote-") || !strings.EqualFold(k[:len("X-Remote-")], "X-Remote-") {
		return false // the common case: one comparison per header
	}
	return strings.EqualFold(k, remoteUserHeader) || strings.EqualFold(k, remoteGroupHeader) ||
		strings.EqualFold(k, remoteUIDHeader) ||
		(len(k) >= len(remoteExtraHeaderPrefix) && strings.EqualFold(k[:len(remoteExtraHeaderPrefix)], remoteExtraHeaderPrefix))
}
