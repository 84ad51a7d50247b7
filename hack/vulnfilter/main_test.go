package main

import (
	"strings"
	"testing"
)

// stream imitates govulncheck -format json: config and progress messages,
// then findings at module, package and symbol level.
const stream = `{"config":{"protocol_version":"v1.0.0"}}
{"progress":{"message":"Scanning your code"}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http"}]}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"ReadRequest"},{"module":"github.com/fanout-dev/fanout","package":"x","function":"y"}]}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"ReadRequest"},{"module":"github.com/fanout-dev/fanout","package":"x","function":"z"}]}}
{"finding":{"osv":"GO-2026-0002","fixed_version":"v0.61.0","trace":[{"module":"golang.org/x/net","version":"v0.60.0","package":"golang.org/x/net/http2"}]}}
`

const calledDep = `{"finding":{"osv":"GO-2026-0003","fixed_version":"v0.61.0","trace":[{"module":"golang.org/x/net","version":"v0.60.0","package":"golang.org/x/net/http2","function":"Framer.ReadFrame"}]}}
`

func TestReport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		strict bool
		code   int
		want   string
	}{
		{"stdlib only, -allow-stdlib: listed once, passes", stream, false, 0, "standard library: GO-2026-0001 stdlib@v1.26.8, fixed in v1.26.9 (called: net/http.ReadRequest)"},
		{"stdlib only, default: fails", stream, true, 1, "or pass -allow-stdlib"},
		{"a called dependency fails", stream + calledDep, false, 1, "dependency: GO-2026-0003 golang.org/x/net@v0.60.0"},
		{"imported but not called: passes", `{"finding":{"osv":"GO-2026-0002","trace":[{"module":"golang.org/x/net","package":"golang.org/x/net/http2"}]}}`, true, 0, "no called vulnerability"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := read(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if code := report(&out, found, tc.strict); code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out.String())
			}
			if strings.Count(out.String(), "GO-2026-0001") > 1 {
				t.Errorf("a vulnerability reached along two paths is listed twice:\n%s", out.String())
			}
		})
	}
}

func TestReadRejectsGarbage(t *testing.T) {
	if _, err := read(strings.NewReader("{not json")); err == nil {
		t.Error("garbage read without an error")
	}
}
