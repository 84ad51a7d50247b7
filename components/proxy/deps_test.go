package proxy

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// requestPath is the packages of the request path: what the sidecar links
// to serve a request.
var requestPath = []string{
	"github.com/fanout-dev/fanout/components/listener",
	"github.com/fanout-dev/fanout/components/proxy",
	"github.com/fanout-dev/fanout/internal/reqinfo",
	"github.com/fanout-dev/fanout/components/watch",
	"github.com/fanout-dev/fanout/components/transport",
}

// kubernetesImportersPending are the fanout packages in the request path's
// dependencies that still import Kubernetes libraries, each to be rid of
// them by its own change: none left. The test fails when one of them no
// longer does, so that the list only shrinks.
var kubernetesImportersPending = []string{}

// TestRequestPathLinksNoKubernetes keeps the Kubernetes libraries out of
// the request path: they are most of the sidecar's executable, and its
// pages are most of its idle memory (docs/footprint.md, "The idle
// process"). Tests may import them (test imports are not linked into the
// binary); the non-test code of the packages the request path builds on
// may not.
func TestRequestPathLinksNoKubernetes(t *testing.T) {
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, requestPath...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var kube int
	importers := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		if isKubernetes(pkg) {
			kube++
			continue
		}
		for imp := range strings.FieldsSeq(imports) {
			if isKubernetes(imp) {
				importers[pkg] = append(importers[pkg], imp)
			}
		}
	}
	t.Logf("%d Kubernetes packages in the request path's dependencies", kube)
	for pkg, imps := range importers {
		if !slices.Contains(kubernetesImportersPending, pkg) {
			t.Errorf("%s imports %s: the request path must not link Kubernetes libraries; "+
				"parse or encode what is needed in fanout (as reqinfo, kstatus and watch/gone.go do), "+
				"or import them from _test.go files only", pkg, strings.Join(imps, ", "))
		}
	}
	for _, pkg := range kubernetesImportersPending {
		if _, ok := importers[pkg]; !ok {
			t.Errorf("%s no longer imports Kubernetes libraries (or is no longer in the request path): "+
				"remove it from kubernetesImportersPending", pkg)
		}
	}
}

func isKubernetes(pkg string) bool {
	return strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/")
}

// TestLayering keeps the arrows of docs/architecture.md pointing one way:
// the protocol packages know nothing of fanout, and no package reaches
// back up the request's path (listener → proxy → balancer → transport).
func TestLayering(t *testing.T) {
	const mod = "github.com/fanout-dev/fanout/"
	forbidden := map[string][]string{
		// Protocol code and vocabulary: no fanout package at all.
		"internal/h1server": {""},
		"internal/h2conn":   {""},
		"internal/reqinfo":  {""},
		"internal/kstatus":  {""},
		// The request's path, downstream never importing upstream.
		"components/proxy":     {"components/listener", "components/engine", "components/sidecar"},
		"components/watch":     {"components/proxy", "components/listener", "components/engine", "components/sidecar"},
		"components/balancer":  {"components/proxy", "components/listener", "components/watch", "components/transport", "components/engine", "components/sidecar"},
		"components/transport": {"components/proxy", "components/listener", "components/watch", "components/balancer", "components/engine", "components/sidecar"},
		"components/listener":  {"components/proxy", "components/engine", "components/sidecar"},
		"components/engine":    {"components/listener", "components/sidecar", "components/admin"},
	}
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			rel, ok := strings.CutPrefix(dep, mod)
			if !ok || rel == pkg {
				continue
			}
			for _, b := range bad {
				if b == "" || rel == b || strings.HasPrefix(rel, b+"/") {
					t.Errorf("%s depends on %s: see docs/architecture.md, the arrows point down the request's path and the protocol packages know nothing of fanout", pkg, rel)
				}
			}
		}
	}
}
