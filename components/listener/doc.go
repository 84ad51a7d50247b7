// Package listener is fanout's loopback server: the port client-go is
// pointed at, in front of the request path (components/proxy's Handler).
//
// It owns what happens before a request reaches the handler: which server
// takes a connection (TLS: net/http; plaintext: internal/h1server, which
// hands h2c to net/http, or net/http for both with --h1-server std, kept
// to measure the two against each other), the downstream limits (--max-connections,
// --max-inflight, --max-long-running, --request-body-timeout) and their
// metrics, the Host check against DNS rebinding, the refusal of
// forward-proxy requests, and the one classification of each request
// (internal/reqinfo), which it hands to the handler for the request's
// context. Stop drains in the order a clean shutdown needs: no new
// connections, long-running requests ended, short ones waited for,
// upgraded connections last.
package listener
