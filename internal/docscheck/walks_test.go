package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// walkSections are the sections of docs/architecture.md that walk a
// request through the code, step by step.
var walkSections = []string{"The walk of a GET", "The walk of a watch"}

// walkStep is a numbered step of a walk: its first code span names a
// file, its second the function or method there that does the step.
var walkStep = regexp.MustCompile("(?m)^(\\d+)\\. `([^`]+)` `([^`]+)`")

// TestArchitectureWalks keeps the walks of docs/architecture.md true:
// every step names, first thing, a file of this repository and the
// function ("name") or method ("Type.Name") it declares that does the
// step, and the steps are numbered in order.
func TestArchitectureWalks(t *testing.T) {
	problems := checkWalks("../..")
	for _, p := range problems {
		t.Error(p)
	}
}

// checkWalks returns what is wrong with the walks of docs/architecture.md
// under root.
func checkWalks(root string) []string {
	src, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, name := range walkSections {
		body, ok := sectionBody(string(src), name)
		if !ok {
			problems = append(problems, "docs/architecture.md has no section "+name)
			continue
		}
		steps := walkStep.FindAllStringSubmatch(body, -1)
		numbered := regexp.MustCompile(`(?m)^\d+\. `).FindAllString(body, -1)
		if len(steps) < 3 || len(steps) != len(numbered) {
			problems = append(problems, name+": every numbered step must open with `file` `function`")
		}
		for i, st := range steps {
			if want := i + 1; st[1] != strconv.Itoa(want) {
				problems = append(problems, name+": step "+st[1]+" where "+strconv.Itoa(want)+" was expected")
			}
			file, fn := st[2], st[3]
			code, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
			if err != nil {
				problems = append(problems, name+" step "+st[1]+": "+file+" does not exist")
				continue
			}
			if !declares(string(code), fn) {
				problems = append(problems, name+" step "+st[1]+": "+file+" declares no "+fn)
			}
		}
	}
	return problems
}

// sectionBody is the text under the heading named name, up to the next
// heading of the same or a higher level.
func sectionBody(src, name string) (string, bool) {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level == 0 || strings.TrimSpace(l[level:]) != name {
			continue
		}
		var body []string
		for _, m := range lines[i+1:] {
			if n := len(m) - len(strings.TrimLeft(m, "#")); n > 0 && n <= level && strings.HasPrefix(m[n:], " ") {
				break
			}
			body = append(body, m)
		}
		return strings.Join(body, "\n"), true
	}
	return "", false
}

// declares tells whether Go source code declares fn: a function "name" or
// a method "Type.Name" (on Type or *Type).
func declares(code, fn string) bool {
	var re string
	if typ, method, ok := strings.Cut(fn, "."); ok {
		re = `(?m)^func \(\w+ \*?` + regexp.QuoteMeta(typ) + `(\[[^\]]*\])?\) ` + regexp.QuoteMeta(method) + `[(\[]`
	} else {
		re = `(?m)^func ` + regexp.QuoteMeta(fn) + `[(\[]`
	}
	return regexp.MustCompile(re).MatchString(code)
}
