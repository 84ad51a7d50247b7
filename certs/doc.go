// Package certs turns the client's kubeconfig into the material fanout
// needs to reach kube-apiserver as that client: the server to bootstrap
// from, the name its certificate must carry, the CA bundle, the client
// certificate and the bearer token. It also writes the kubeconfig that
// points the client at fanout instead.
//
// Credentials are read through methods, never fields, so that material
// can rotate underneath: a tokenFile is re-read when it changes, and
// certificate rotation can be added without changing callers.
package certs
