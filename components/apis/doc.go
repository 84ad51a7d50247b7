// Package apis keeps what each kube-apiserver endpoint serves: its version
// and the group/versions, resources and subresources of its discovery,
// read over the sidecar's credentials when the endpoint appears or turns
// ready again, then every 30 s with ETags. The balancer routes a resource
// request only to endpoints that serve it while they differ, as during an
// upgrade, and the proxy asks the Discoverer to answer discovery requests
// from the union of the endpoints' documents meanwhile (merge.go,
// serve.go; docs/resilience.md, "Version skew").
package apis
