package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRepository is the check itself: every link, anchor and file
// mention of this repository resolves.
func TestRepository(t *testing.T) {
	problems, err := Check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Log("fix the link or mention, or the heading it points at; anchors follow GitHub's rules (Slug)")
	}
}

// TestCheckFindsBroken holds Check to a small repository with one of each
// kind of broken pointer (testdata/repo; what it must report in
// testdata/repo.want), and to nothing more: its good
// links and mentions must pass.
func TestCheckFindsBroken(t *testing.T) {
	got, err := Check("testdata/repo")
	if err != nil {
		t.Fatal(err)
	}
	// The expected problems are in a file of their own, as they name
	// files that exist only in the fixture.
	b, err := os.ReadFile("testdata/repo.want")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(b)), "\n")
	var gotS []string
	for _, p := range got {
		gotS = append(gotS, p.String())
	}
	if !slices.Equal(gotS, want) {
		t.Errorf("Check(testdata/repo):\n%s\nwant:\n%s", strings.Join(gotS, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Shared loopback: `--listen-tls`", "shared-loopback---listen-tls"},
		{"fanout restarts: `fanout hold` (internal/handoff)", "fanout-restarts-fanout-hold-internalhandoff"},
		{"Zone placement (components/balancer/zone.go)", "zone-placement-componentsbalancerzonego"},
		{"HTTP/1.1 request smuggling and framing", "http11-request-smuggling-and-framing"},
		{"fanout's own HTTP/1.1 server", "fanouts-own-http11-server"},
		{"1. Proxy overhead (fast TLS HTTP/2 backends)", "1-proxy-overhead-fast-tls-http2-backends"},
		{"`GET /debug/cost`", "get-debugcost"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"[A link](https://example.com) and **bold**", "a-link-and-bold"},
		{"Größe × 2 → µs", "größe--2--µs"},
		{"Launch 🚀 now", "launch--now"},
	} {
		if got := Slug(headingText(tc.heading)); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	src := strings.Join([]string{
		"# A",
		"## A",
		"### A-1 ###",
		"```",
		"# In a code block",
		"```",
		"~~~~",
		"## Also in one",
		"~~~~",
		"####### Seven is not a heading",
		"#Nor without a space",
		`<a id="kept"></a>`,
		"## A",
	}, "\n")
	want := []string{"a", "a-1", "a-1-1", "a-2", "kept"}
	if got := Anchors(src); !slices.Equal(got, want) {
		t.Errorf("Anchors = %q, want %q", got, want)
	}
}

func TestCodeSpans(t *testing.T) {
	text := "a `b` c ``d ` e`` f ` g"
	var got []string
	for _, s := range codeSpans(text) {
		got = append(got, text[s[0]:s[1]])
	}
	if want := []string{"`b`", "``d ` e``"}; !slices.Equal(got, want) {
		t.Errorf("codeSpans(%q) = %q, want %q", text, got, want)
	}
}

// TestDocsIndex keeps docs/README.md, the index of docs/, listing every
// page there.
func TestDocsIndex(t *testing.T) {
	index, err := os.ReadFile("../../docs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		name := filepath.Base(p)
		if name != "README.md" && !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not link %s: add a line saying what it is for", name)
		}
	}
}
