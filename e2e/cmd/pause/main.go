// Command pause is the sandbox ("pause") container of the e2e harness's real
// node: it holds the pod's namespaces and does nothing until it is told to
// stop. The harness builds it statically into an image of its own, so the
// node never pulls registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}
