// Package harness runs a real Kubernetes control plane for fanout's
// end-to-end tests: an embedded etcd, several kube-apiservers (each on its
// own test host, a network namespace on a private bridge), the real
// kube-controller-manager and kube-scheduler, fanout sidecars in front of
// them, an L4 TCP proxy to compare against, fault injection, and audit-log
// accounting of which apiserver served which client.
//
// The Kubernetes binaries are built from this module's go.mod version once
// and cached under ${XDG_CACHE_HOME:-$HOME/.cache}/fanout-e2e/<version>/,
// because a cold build takes about 13 minutes on two cores. fanout itself is
// rebuilt from the repository root on every run so tests never exercise a
// stale sidecar.
//
// Everything the harness creates (processes, namespaces, links) is torn down
// when a test ends, when the run gets SIGINT or SIGTERM (see Main), and, for
// runs that were SIGKILLed, swept at the start of the next run.
package harness
