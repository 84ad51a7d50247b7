package listener

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEdgeImportsNoProxy: the listener is the request's edge and knows
// the request path behind it only as a Handler; the request's state it
// makes lives in the vocabulary package (internal/reqinfo). Importing
// components/proxy (or the engine that builds it) would let it call back
// into the handler again. The proxy's TestLayering checks every arrow of
// docs/architecture.md; this one runs even when the proxy's tests cannot
// build because of such an import.
func TestEdgeImportsNoProxy(t *testing.T) {
	const mod = "github.com/fanout-dev/fanout/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+"components/listener").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, bad := range []string{"components/proxy", "components/engine", "components/sidecar", "components/watch", "components/transport"} {
			if dep == mod+bad {
				t.Errorf("the listener depends on %s: it must reach the handler only through its Handler interface "+
					"and the request's state through internal/reqinfo (docs/architecture.md, The walk of a GET)", bad)
			}
		}
	}
}
