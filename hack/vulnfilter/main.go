// Command vulnfilter reads `govulncheck -format json` on stdin and decides
// what CI does with it: a vulnerable function that fanout calls fails the
// run, whether it lives in a dependency (fix: raise it in go.mod) or in the
// Go standard library (fix: raise the go line of every go.mod and
// GOTOOLCHAIN in the Makefile and .ci/run). -allow-stdlib lists
// standard-library findings without failing, for a machine that cannot get
// the fixed toolchain yet (see docs/security.md).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// finding is the part of govulncheck's "finding" message used here.
type finding struct {
	OSV          string  `json:"osv"`
	FixedVersion string  `json:"fixed_version"`
	Trace        []frame `json:"trace"`
}

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

type message struct {
	Finding *finding `json:"finding"`
}

// called is one vulnerability reached by fanout's code.
type called struct {
	id, module, version, fixed, symbol string
}

func main() {
	allowStdlib := flag.Bool("allow-stdlib", false, "list standard-library findings without failing (for a toolchain that cannot be raised yet)")
	flag.Parse()
	found, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vulnfilter: reading govulncheck's JSON: %v\n", err)
		os.Exit(2)
	}
	os.Exit(report(os.Stdout, found, !*allowStdlib))
}

// read returns the vulnerabilities whose vulnerable function is called
// (govulncheck also reports imported packages and required modules, which
// fanout does not reach), one per OSV id and module.
func read(r io.Reader) ([]called, error) {
	dec := json.NewDecoder(r)
	seen := map[string]bool{}
	var out []called
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		top := f.Trace[0]
		key := f.OSV + " " + top.Module
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, called{id: f.OSV, module: top.Module, version: top.Version, fixed: f.FixedVersion, symbol: top.Package + "." + top.Function})
	}
	slices.SortFunc(out, func(a, b called) int { return strings.Compare(a.module+a.id, b.module+b.id) })
	return out, nil
}

// report prints the findings and returns the exit code.
func report(w io.Writer, found []called, strict bool) int {
	var deps, std int
	for _, c := range found {
		kind := "dependency"
		if c.module == "stdlib" {
			kind = "standard library"
			std++
		} else {
			deps++
		}
		fmt.Fprintf(w, "%s: %s %s@%s, fixed in %s (called: %s)\n", kind, c.id, c.module, c.version, c.fixed, c.symbol)
	}
	switch {
	case deps > 0:
		fmt.Fprintf(w, "vulnfilter: %d vulnerable dependency functions are called: raise those modules in go.mod\n", deps)
		return 1
	case std > 0 && strict:
		fmt.Fprintf(w, "vulnfilter: %d standard-library vulnerabilities are reached: build with the Go release that fixes them (the go line of every go.mod and GOTOOLCHAIN in the Makefile and .ci/run), or pass -allow-stdlib to list them without failing\n", std)
		return 1
	case std > 0:
		fmt.Fprintf(w, "vulnfilter: no vulnerable dependency is called; %d standard-library vulnerabilities are reached, fixed by a newer Go toolchain (listed above, not failed on with -allow-stdlib)\n", std)
	default:
		fmt.Fprintln(w, "vulnfilter: no called vulnerability")
	}
	return 0
}
