package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// k8sAllowed are the imports of k8s.io packages the sidecar binary may
// have: none. Keep it the one place for exceptions, should one ever be
// needed again.
var k8sAllowed = []struct {
	importer string
	subtree  bool   // importer's subpackages too
	imported string // "" for any k8s.io package
}{}

func k8sImportAllowed(importer, imported string) bool {
	for _, a := range k8sAllowed {
		if (importer == a.importer || a.subtree && strings.HasPrefix(importer, a.importer+"/")) &&
			(a.imported == "" || imported == a.imported) {
			return true
		}
	}
	return false
}

// TestNoKubernetesLibraries guards the sidecar's idle footprint: most of
// its RSS is the executable's pages, and the Kubernetes libraries were
// half of its packages (docs/footprint.md). It walks the import graph of
// this binary from its main package, not following the imports that
// k8sAllowed permits, and fails on every k8s.io package it reaches, with
// the chain of imports that reaches it.
func TestNoKubernetesLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	main := ""
	total := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		imports[f[0]] = f[1:]
		main = f[0] // go list -deps prints the package itself last
		if strings.HasPrefix(f[0], "k8s.io/") {
			total++
		}
	}
	t.Logf("%d packages linked, %d of them k8s.io/...", len(imports), total)
	from := map[string]string{main: ""}
	queue := []string{main}
	var reached []string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, "k8s.io/") {
			reached = append(reached, p)
			continue
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; seen || strings.HasPrefix(q, "k8s.io/") && k8sImportAllowed(p, q) {
				continue
			}
			from[q] = p
			queue = append(queue, q)
		}
	}
	slices.Sort(reached)
	for _, p := range reached {
		chain := []string{p}
		for q := from[p]; q != ""; q = from[q] {
			chain = append(chain, q)
		}
		slices.Reverse(chain)
		t.Errorf("the sidecar links %s: %s", p, strings.Join(chain, " -> "))
	}
	if len(reached) > 0 {
		t.Log("drop that import; exceptions, while the request path still needs them, are listed in k8sAllowed")
	}
}
