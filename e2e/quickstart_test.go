package e2e_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The README's quick start, as TestNodeQuickStart runs it: the commands of
// the first sh block after "Install it in a cluster", with their
// placeholders, and the overlay of docs/injector.md's Install section.
// Reading them from the documents, not from a copy, is what makes the test
// fail when the documents drift.

// quickStartStep is one command of the README's quick start.
type quickStartStep struct {
	kind string   // what the test does around it: apply, label, rolebinding, restart, status
	args []string // as written, "kubectl" first, placeholders unreplaced
}

// quickStartKinds tells a command by its first words after kubectl (and
// "-n NS"); every command of the block must be one of them, each once, so
// that a command added to the README or dropped from it fails the test
// until the test runs it too.
var quickStartKinds = []struct{ kind, prefix string }{
	{"apply", "apply -k OVERLAY"},
	{"label", "label namespace NS fanout.dev/inject=enabled"},
	{"rolebinding", "create rolebinding"},
	{"restart", "rollout restart deployment NAME"},
	{"status", "exec POD -c fanout -- "},
}

// readmeQuickStart parses the README's quick start commands.
func readmeQuickStart(t *testing.T) []quickStartStep {
	t.Helper()
	path, err := harness.RepoPath("README.md")
	if err != nil {
		t.Fatal(err)
	}
	block, err := codeBlockAfter(path, "Install it in a cluster", "```sh")
	if err != nil {
		t.Fatal(err)
	}
	var steps []quickStartStep
	seen := map[string]bool{}
	for _, line := range block {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] != "kubectl" {
			t.Fatalf("README quick start: %q is not a kubectl command; TestNodeQuickStart runs only kubectl", line)
		}
		rest := f[1:]
		if len(rest) >= 2 && rest[0] == "-n" {
			rest = rest[2:]
		}
		words := strings.Join(rest, " ")
		kind := ""
		for _, k := range quickStartKinds {
			if strings.HasPrefix(words, k.prefix) {
				kind = k.kind
			}
		}
		if kind == "" || seen[kind] {
			t.Fatalf("README quick start: TestNodeQuickStart does not know what to do around %q (a new or repeated command); teach it (e2e/quickstart_test.go)", line)
		}
		seen[kind] = true
		steps = append(steps, quickStartStep{kind: kind, args: f})
	}
	for _, k := range quickStartKinds {
		if !seen[k.kind] {
			t.Fatalf("README quick start has no command starting %q: the quick start is incomplete, or the test is out of date", "kubectl "+k.prefix)
		}
	}
	if steps[0].kind != "apply" || steps[len(steps)-1].kind != "status" {
		t.Fatalf("README quick start: want the apply first and the status check last, got %v", steps)
	}
	return steps
}

// docsOverlay returns the overlay of docs/injector.md's Install section
// with the image and the path to manifests/injector replaced, and checks
// that each replacement happened.
func docsOverlay(t *testing.T, manifests, imageName, imageTag string) string {
	t.Helper()
	path, err := harness.RepoPath("docs", "injector.md")
	if err != nil {
		t.Fatal(err)
	}
	block, err := codeBlockAfter(path, "## Install", "```yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(block) == 0 || !strings.HasPrefix(block[0], "# OVERLAY/kustomization.yaml") {
		t.Fatalf("docs/injector.md, Install: the first yaml block is not the overlay (# OVERLAY/kustomization.yaml ...)")
	}
	text := strings.Join(block, "\n") + "\n"
	for _, r := range []struct{ old, new string }{
		{"../manifests/injector", manifests},
		{"registry.example.com/fanout", imageName},
		{"v1.0.0", imageTag},
	} {
		if !strings.Contains(text, r.old) {
			t.Fatalf("docs/injector.md's overlay no longer holds %q, which the test replaces:\n%s", r.old, text)
		}
		text = strings.ReplaceAll(text, r.old, r.new)
	}
	return text
}

// codeBlockAfter returns the lines of the first fenced block opened by
// fence after the first line containing marker, without their common
// indentation (blocks in list items are indented).
func codeBlockAfter(path, marker, fence string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found, in := false, false
	indent := ""
	var out []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found:
			found = strings.Contains(line, marker)
		case !in:
			if trimmed := strings.TrimLeft(line, " "); trimmed == fence {
				in, indent = true, line[:len(line)-len(trimmed)]
			}
		case strings.TrimSpace(line) == "```":
			return out, nil
		default:
			out = append(out, strings.TrimPrefix(line, indent))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no %s block after %q", filepath.Base(path), fence, marker)
}

// replacePlaceholders replaces whole words (NS, NAME, ...) in args.
func replacePlaceholders(args []string, values map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range values {
			a = regexp.MustCompile(`\b`+k+`\b`).ReplaceAllLiteralString(a, v)
		}
		out[i] = a
	}
	return out
}

// TestQuickStartDocs parses the README's quick start and the overlay of
// docs/injector.md without a cluster, so that drift shows in a second, not
// only on the real node.
func TestQuickStartDocs(t *testing.T) {
	steps := readmeQuickStart(t)
	for _, s := range steps {
		t.Logf("%s: %s", s.kind, strings.Join(s.args, " "))
	}
	_, tag, _ := strings.Cut(harness.FanoutImage, ":")
	t.Logf("overlay:\n%s", docsOverlay(t, "../fanout/manifests/injector", "ghcr.io/fanout-dev/fanout", tag))
}
