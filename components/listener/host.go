package listener

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/fanout-dev/fanout/internal/kstatus"
)

// withLoopbackHost refuses requests whose Host is not a loopback name or
// address, against DNS rebinding: a web page in a browser on the node (or
// anything else that resolves names an attacker controls) can point
// evil.example at 127.0.0.1 and then reach fanout as a same-origin
// request, with Host: evil.example:7080. Every legitimate client of the
// loopback listener dials it by loopback address (the kubeconfig fanout
// writes says http://127.0.0.1:PORT, or https:// with --listen-tls), so
// it sends one of: localhost, an address in 127.0.0.0/8, or ::1, with or
// without the port. The port is not compared: the listener is the only
// thing at its port anyway, and a proxy that forwards to it may rewrite it.
//
// With --allow-remote clients reach fanout by names fanout cannot know,
// and the check is off (Config.AllowAnyHost).
func withLoopbackHost(next http.Handler) http.Handler { return &loopbackHost{next} }

// loopbackHost is withLoopbackHost's handler. The edge's handlers are
// types of their own, not http.HandlerFuncs, so that a watch's stack holds
// no HandlerFunc frame between them for its life (cmd/fanout's
// TestFootprintPerWatch).
type loopbackHost struct{ next http.Handler }

func (h *loopbackHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isLoopbackHost(r.Host) {
		refuseHost(w, r.Host)
		return
	}
	h.next.ServeHTTP(w, r)
}

// refuseHost answers a request for another Host 403. It is a function of
// its own so that its message is built off the frame a watch stays parked
// below (cmd/fanout's TestFootprintPerWatch).
func refuseHost(w http.ResponseWriter, host string) {
	kstatus.Write(w, http.StatusForbidden, kstatus.ReasonForbidden,
		"fanout answers requests addressed to a loopback name or address only (localhost, 127.0.0.1, [::1]), against DNS rebinding; got Host "+
			quoteURI(host)+". Point the client at http://127.0.0.1:PORT (the kubeconfig fanout writes does), "+
			"or start fanout with --allow-remote if it is meant to be reached by other names")
}

// isLoopbackHost reports whether host (a Host header: name or address,
// with an optional port, IPv6 in brackets) is localhost or a loopback
// address. It does not allocate: it runs on every request.
func isLoopbackHost(host string) bool {
	switch {
	case strings.HasPrefix(host, "["):
		// [::1] or [::1]:7080
		end := strings.IndexByte(host, ']')
		if end < 0 || (end+1 < len(host) && (host[end+1] != ':' || !isPort(host[end+2:]))) {
			return false
		}
		host = host[1:end]
	case strings.Count(host, ":") == 1:
		i := strings.IndexByte(host, ':')
		if !isPort(host[i+1:]) {
			return false
		}
		host = host[:i]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// isPort reports whether s is a port number: digits, possibly none (a
// Host of "localhost:" is valid and means the default port).
func isPort(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) <= 5
}
