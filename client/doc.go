// Package client is fanout as a library: it turns a client-go
// *rest.Config into one whose requests are balanced one by one across
// every kube-apiserver, inside the program, without the sidecar.
//
//	cfg, closer, err := client.Wrap(restConfig, client.WithEndpoints("dns:///apiservers.example:6443"))
//	if err != nil { ... }
//	defer closer.Close()
//	clientset := kubernetes.NewForConfigOrDie(cfg)
//
// The returned config works for typed clientsets, dynamic clients,
// informers and controller-runtime managers: they all build their HTTP
// client from rest.Config.Transport, which Wrap sets to the sidecar's
// request path (components/proxy Handler.RoundTripper). The resolver,
// balancer, readiness prober, connection pools, retries of requests the
// apiserver never processed, watch handling and rebalancing are the
// sidecar's engine (components/engine); this package only turns the
// rest.Config and the options into the engine's Config, as
// sidecar.EngineConfig does with the sidecar's flags. See
// docs/library.md and docs/architecture.md.
package client
