// Package proxy is the request policy of fanout: the http.Handler a
// client-go controller talks to (served by components/listener in the
// sidecar) and the RoundTripper the library links.
//
// Every request is classified once, at the edge (package reqinfo: short or
// long-running, verb, whose answer it is, whether it brings its own
// credentials), which the listener puts in the request's context
// (reqinfo.WithRequest) as kube-apiserver's WithRequestInfo does; the
// handler reads it there, hangs its own state on it (newState), and
// classify.go maps it to the balancer's kind and class and the transport's
// credentials mode; everything behind reads that result. What the proxy
// holds for a request is given back at the request's one end (end.go). The forwarder then runs
// the one attempt policy (attempt.go): it asks the balancer for an
// endpoint, sends the request through the transport for that endpoint (or,
// for an upgrade, over its own HTTP/1.1 connection), looks at the answer,
// and retries elsewhere within the retry budget when the answer or the
// transport's typed error says that is safe. Failures become Kubernetes
// Status objects that client-go understands. Long-running responses go
// through the watch features (package watch) by one hook.
//
// Classification is a pure function and the picker is lock-free; the cost
// table, when on, takes its lock briefly to find each request's row.
// Shutdown is an atomic flag (StopLongRunning sets it; later requests get
// 503, or ErrStopped from the RoundTripper) plus two sets, each behind a
// mutex held only to add or remove an entry: the open long-running
// bodies, which StopLongRunning ends each on a goroutine of its own, and
// the upgraded connections, which CloseUpgrades closes once the shutdown
// grace has run out.
package proxy
