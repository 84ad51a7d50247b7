package main

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// variantPrefix starts the target name of a -fanout-variants entry: the
// variant "steady" is measured as the path "fanout+steady".
const variantPrefix = "fanout+"

var variantName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// parseVariants parses -fanout-variants: comma-separated name=flags, where
// flags are fanout's extra flags separated by spaces (so a flag's value
// can hold neither a comma nor a space), e.g.
// "steady=--sysmon=steady,adaptive=--max-procs adaptive". It returns the
// variants' target names in the order given and each one's flags.
func parseVariants(spec string) (targets []string, args map[string][]string, err error) {
	args = map[string][]string{}
	for _, v := range strings.Split(spec, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		name, flags, ok := strings.Cut(v, "=")
		name = strings.TrimSpace(name)
		fields := strings.Fields(flags)
		switch {
		case !ok || !variantName.MatchString(name):
			return nil, nil, fmt.Errorf("-fanout-variants: %q: want name=flags with a name of lower-case letters, digits and dashes, e.g. steady=--sysmon=steady", v)
		case len(fields) == 0 || !strings.HasPrefix(fields[0], "-"):
			return nil, nil, fmt.Errorf("-fanout-variants: %q: want fanout's flags after %s=, e.g. %s=--max-procs=2", v, name, name)
		}
		t := variantPrefix + name
		if _, dup := args[t]; dup {
			return nil, nil, fmt.Errorf("-fanout-variants: %s given twice", name)
		}
		targets = append(targets, t)
		args[t] = fields
	}
	return targets, args, nil
}

// renderVariants is the table that compares each -fanout-variants path
// with fanout as built, at each phase: medians over runs with their
// range, and the difference in CPU paired by run (both ran in the same
// rotation, minutes apart), which is what decides whether a variant
// gains more than the rounds differ.
func renderVariants(b *strings.Builder, o *OverheadResult) {
	if o == nil || len(o.VariantArgs) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var variants []string
	for _, r := range o.Rows {
		if _, ok := o.VariantArgs[r.Target]; ok && !slices.Contains(variants, r.Target) {
			variants = append(variants, r.Target)
		}
	}
	p("\n### fanout's variants (-fanout-variants)\n\n")
	p("Each variant is fanout as built with extra flags, measured in the same rotation as the other paths. ")
	p("Cells are the median over runs and, in brackets, the lowest and highest run. ")
	p("The paired difference is the variant's proxy CPU per 10k requests minus fanout's in the same run and phase: its median, its range, and in how many runs the variant used less.\n\n")
	p("| path | flags | load | runs | proxy CPU s / 10k req | paired difference to fanout | variant lower in | p99 |\n")
	p("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	phases := func(target string) []string {
		var out []string
		for _, r := range o.Rows {
			if r.Target == target {
				out = append(out, r.Phase)
			}
		}
		return out
	}
	for _, t := range append([]string{targetFanout}, variants...) {
		for _, ph := range phases(t) {
			var cpu, p99, diff []float64
			lower := 0
			for _, m := range o.Measures {
				if m.Target != t || m.Phase != ph {
					continue
				}
				c := per10k(m.CPUSeconds, m.Load.OK)
				cpu = append(cpu, c)
				p99 = append(p99, float64(m.Lat.P99))
				if t == targetFanout {
					continue
				}
				for _, f := range o.Measures {
					if f.Target == targetFanout && f.Phase == ph && f.Run == m.Run {
						d := c - per10k(f.CPUSeconds, f.Load.OK)
						diff = append(diff, d)
						if d < 0 {
							lower++
						}
					}
				}
			}
			flags, paired, count := "(as built)", "—", "—"
			if t != targetFanout {
				flags = "`" + strings.Join(o.VariantArgs[t], " ") + "`"
			}
			if len(diff) > 0 {
				lo, hi := spread(diff)
				paired = fmt.Sprintf("%+.3f [%+.3f, %+.3f]", Median(diff), lo, hi)
				count = fmt.Sprintf("%d of %d", lower, len(diff))
			}
			lo, hi := spread(cpu)
			plo, phi := spread(p99)
			p("| %s | %s | %s | %d | %s [%s, %s] | %s | %s | %s [%s, %s] |\n", t, flags, ph, len(cpu),
				fmtF(Median(cpu), 3), fmtF(lo, 3), fmtF(hi, 3), paired, count,
				fmtDur(time.Duration(Median(p99))), fmtDur(time.Duration(plo)), fmtDur(time.Duration(phi)))
		}
	}
}

// spread is the least and the greatest of xs, NaNs left out (NaN, NaN for
// none).
func spread(xs []float64) (lo, hi float64) {
	lo, hi = math.NaN(), math.NaN()
	for _, x := range xs {
		if math.IsNaN(x) {
			continue
		}
		if math.IsNaN(lo) || x < lo {
			lo = x
		}
		if math.IsNaN(hi) || x > hi {
			hi = x
		}
	}
	return lo, hi
}
