// Package webhook is fanout-injector's one job: decide whether a Pod
// labelled fanout.dev/inject="true" can get a fanout sidecar, and if so
// mutate it (Config.Mutate, pure and idempotent), and answer kube-apiserver's
// AdmissionReview with the JSONPatch that does the same (Handler). Pods it
// cannot handle are left alone with an admission warning and a metric:
// a broken or confused injector must never block a control plane.
package webhook
