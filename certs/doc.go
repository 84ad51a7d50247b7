// Package certs turns the client's kubeconfig into the material fanout
// needs to reach kube-apiserver as that client: the server to bootstrap
// from, the name its certificate must carry, the CA bundle, the client
// certificate and the bearer token. It also writes the kubeconfig that
// points the client at fanout instead, and serves a TLS key pair from
// files for a webhook server (ServingCertificate).
//
// Credentials are read through methods, never fields, so that material
// rotates underneath: between Start and Stop the kubeconfig and every file
// it names are watched (their directories, through fsnotify, plus polling)
// and re-read when they change. A broken file keeps the last good material.
// See docs/credentials.md.
package certs
