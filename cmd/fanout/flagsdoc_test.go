package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// flagsDoc is the generated part of docs/flags.md, after this marker.
const (
	flagsDocPath   = "../../docs/flags.md"
	flagsDocMarker = "<!-- Generated from fanout's flags by TestFlagReference (cmd/fanout); do not edit below. FANOUT_UPDATE_DOCS=1 go test ./cmd/fanout -run TestFlagReference rewrites it. -->\n"
)

// TestFlagReference keeps docs/flags.md the same as --help: one row per
// flag, with its type, default and text.
func TestFlagReference(t *testing.T) {
	fs, _, _, _ := flags()
	want := flagTable(fs)
	raw, err := os.ReadFile(flagsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, flagsDocMarker)
	if i < 0 {
		t.Fatalf("docs/flags.md has no line %q", strings.TrimSpace(flagsDocMarker))
	}
	if got := doc[i+len(flagsDocMarker):]; got != want {
		if os.Getenv("FANOUT_UPDATE_DOCS") == "1" {
			if err := os.WriteFile(flagsDocPath, []byte(doc[:i+len(flagsDocMarker)]+want), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/flags.md differs from fanout's flags; run FANOUT_UPDATE_DOCS=1 go test ./cmd/fanout -run TestFlagReference\n got: %.300q\nwant: %.300q", got, want)
	}
}

// flagTable renders fs as a Markdown table in --help's order.
func flagTable(fs *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("\n| flag | default | meaning |\n| --- | --- | --- |\n")
	fs.VisitAll(func(f *pflag.Flag) {
		name := "`--" + f.Name
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		varname, usage := pflag.UnquoteUsage(f)
		if varname != "" {
			name += " " + varname
		}
		name += "`"
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(name), cell(def), cell(usage))
	})
	return b.String()
}
