// Package health actively probes each kube-apiserver endpoint's /readyz and
// reports the result to the balancer.
//
// Passive ejection only notices an apiserver that fails requests. A
// restarted apiserver accepts connections before it is ready and then
// answers wrongly (403 while its RBAC cache syncs), and one that is
// shutting down fails /readyz before it stops serving: only asking /readyz
// keeps traffic away from both.
package health
