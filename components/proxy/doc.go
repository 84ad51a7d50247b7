// Package proxy is the loopback side of fanout: the http.Handler a client-go
// controller talks to, and the server it runs in.
//
// For every request it classifies the request (short or long-running, which
// credentials it carries), asks the balancer for an endpoint, forwards the
// request through the transport for that endpoint, retries once elsewhere
// when the transport says the apiserver never received it, and turns every
// failure into a Kubernetes Status object that client-go understands.
//
// The request path takes no lock: classification is a pure function, the
// picker is immutable, shutdown is an atomic flag plus one context.
package proxy
