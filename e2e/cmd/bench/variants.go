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

// ruleMargin is the 15% rule: an own component that a variant swaps for
// the standard library's stays only if fanout as built does at least this
// much better than the variant, as a share of the variant's figure, on
// proxy CPU per 10k requests or on heap and stacks per open watch. Less
// than that does not pay for the code we keep.
const ruleMargin = 0.15

// roundValue is one path's figure in one run of a rotation.
type roundValue struct {
	Target string
	Run    int
	V      float64
}

// variantFigure is one figure of the variants' table with every path's
// value in every run.
type variantFigure struct {
	Letter, Name string
	// HigherBetter is set for requests per CPU-second; of CPU, latency
	// and memory less is better.
	HigherBetter bool
	// Rule marks the figures the 15% rule reads.
	Rule bool
	// Prec is how many decimals are shown; Dur says V is a time.Duration.
	Prec   int
	Dur    bool
	Values []roundValue
}

// variantFigures gathers what the variants are judged by: (a) requests
// per CPU-second at saturation, (b) proxy CPU per 10k requests and (c) p99
// at each fixed rate, from the overhead section's runs; (d) heap and
// stacks, and RSS, per open watch, from the footprint section's rounds;
// (e) idle RSS, from the overhead section. A figure this run did not
// measure is left out.
func variantFigures(o *OverheadResult, f *FootprintResult) []variantFigure {
	var figs []variantFigure
	if o != nil {
		from := func(phase string, v func(PhaseMeasure) float64) []roundValue {
			var out []roundValue
			for _, m := range o.Measures {
				if m.Phase == phase {
					out = append(out, roundValue{Target: m.Target, Run: m.Run, V: v(m)})
				}
			}
			return out
		}
		var saturation string
		var rated []string
		for _, r := range o.Rows {
			if r.Rate == 0 {
				saturation = r.Phase
			} else if !slices.Contains(rated, r.Phase) {
				rated = append(rated, r.Phase)
			}
		}
		if saturation != "" {
			figs = append(figs, variantFigure{Letter: "a", Name: "requests per CPU-second at " + saturation, HigherBetter: true,
				Values: from(saturation, func(m PhaseMeasure) float64 { return 10000 / per10k(m.CPUSeconds, m.Load.OK) })})
		}
		for _, ph := range rated {
			figs = append(figs, variantFigure{Letter: "b", Name: "proxy CPU s / 10k requests at " + ph, Rule: true, Prec: 3,
				Values: from(ph, func(m PhaseMeasure) float64 { return per10k(m.CPUSeconds, m.Load.OK) })})
		}
		for _, ph := range rated {
			figs = append(figs, variantFigure{Letter: "c", Name: "p99 at " + ph, Dur: true,
				Values: from(ph, func(m PhaseMeasure) float64 { return float64(m.Lat.P99) })})
		}
	}
	if f != nil && len(f.Rounds) > 0 {
		var mem, rss []roundValue
		for _, r := range f.Rounds {
			mem = append(mem, roundValue{Target: r.Target, Run: r.Run, V: r.Row.heapPerWatch() + r.Row.stacksPerWatch()})
			rss = append(rss, roundValue{Target: r.Target, Run: r.Run, V: per(r.Row.Before.RSSKiB, r.Row.After.RSSKiB, r.Row.Watches)})
		}
		figs = append(figs,
			variantFigure{Letter: "d", Name: "heap and stacks per open watch (KiB)", Rule: true, Prec: 2, Values: mem},
			variantFigure{Letter: "d", Name: "RSS per open watch (KiB)", Prec: 1, Values: rss})
	}
	if o != nil && len(o.IdleRounds) > 0 {
		figs = append(figs, variantFigure{Letter: "e", Name: "idle RSS (MiB)", Prec: 1, Values: o.IdleRounds})
	}
	return figs
}

// variantRow is one path's line of a figure: the median over runs and
// their range, and for a variant how it did against fanout as built in
// the same run.
type variantRow struct {
	Target         string
	Runs           int
	Median, Lo, Hi float64
	// Paired is how many runs had fanout's figure too. Diff, DiffLo and
	// DiffHi are the median, least and greatest of the variant's figure
	// minus fanout's; Better counts the runs the variant did better in;
	// Gain is the median of how much better fanout did, as a share of
	// the variant's figure (negative where the variant did better).
	Paired               int
	Diff, DiffLo, DiffHi float64
	Better               int
	Gain                 float64
}

// rows are the figure's lines for paths, fanout first; a path without a
// value is left out.
func (fg variantFigure) rows(paths []string) []variantRow {
	base := map[int]float64{}
	for _, v := range fg.Values {
		if v.Target == targetFanout && !math.IsNaN(v.V) {
			base[v.Run] = v.V
		}
	}
	var out []variantRow
	for _, t := range paths {
		var xs, diffs, gains []float64
		better := 0
		for _, v := range fg.Values {
			if v.Target != t || math.IsNaN(v.V) {
				continue
			}
			xs = append(xs, v.V)
			f, ok := base[v.Run]
			if t == targetFanout || !ok {
				continue
			}
			d := v.V - f
			diffs = append(diffs, d)
			if fg.HigherBetter && d > 0 || !fg.HigherBetter && d < 0 {
				better++
			}
			if v.V != 0 {
				if fg.HigherBetter {
					d = -d
				}
				gains = append(gains, d/v.V)
			}
		}
		if len(xs) == 0 {
			continue
		}
		r := variantRow{Target: t, Runs: len(xs), Median: Median(xs), Paired: len(diffs), Diff: Median(diffs), Better: better, Gain: Median(gains)}
		r.Lo, r.Hi = spread(xs)
		r.DiffLo, r.DiffHi = spread(diffs)
		out = append(out, r)
	}
	return out
}

func (fg variantFigure) value(x float64) string {
	switch {
	case math.IsNaN(x):
		return "—"
	case fg.Dur:
		return fmtDur(time.Duration(x))
	}
	return fmtF(x, fg.Prec)
}

func (fg variantFigure) signed(x float64) string {
	switch {
	case math.IsNaN(x):
		return "—"
	case fg.Dur:
		return fmtSignedDur(time.Duration(x))
	}
	return fmt.Sprintf("%+.*f", fg.Prec, x)
}

// renderVariants is the table that compares each -fanout-variants path
// with fanout as built on the figures variantFigures gathers: medians over
// runs with their range, and differences paired by run (both ran in the
// same rotation, minutes apart), which is what tells whether a variant
// differs by more than the runs do. The 15% rule's verdict follows.
func renderVariants(b *strings.Builder, r *Report) {
	if len(r.Variants) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	paths := append([]string{targetFanout}, r.Variants...)
	figs := variantFigures(r.Overhead, r.Footprint)
	p("\n### fanout's variants (-fanout-variants)\n\n")
	p("Each variant is fanout as built with extra flags:")
	for _, v := range r.Variants {
		p(" **%s** `%s`;", v, strings.Join(r.VariantArgs[v], " "))
	}
	p(" each ran as a fresh process in every run of the overhead section, in the same rotation as the other paths")
	if r.Footprint != nil && len(r.Footprint.Rounds) > 0 {
		p(", and in every run of the footprint section beside fanout as built (the same rotation; %d watches over HTTP/1.1, one connection each, through a fresh process with `--enable-pprof`, read as in section 4)", r.Footprint.Watches)
	}
	p(". Cells are the median over runs and, in brackets, the lowest and the highest run. ")
	p("**variant − fanout** is the variant's figure minus fanout's in the same run: the median of those differences, and their lowest and highest; **variant better in** counts the runs in which the variant did better (less CPU, latency or memory; more requests per CPU-second). ")
	p("**fanout better by** is the median over the same runs of how much better fanout as built did, as a share of the variant's figure: (variant − fanout) / variant, for requests per CPU-second (fanout − variant) / variant; negative where the variant did better.\n\n")
	p("| figure | path | runs | median [lowest, highest] | variant − fanout, same run | variant better in | fanout better by |\n")
	p("| --- | --- | --- | --- | --- | --- | --- |\n")
	// gains[variant] are the rule's figures, as "18.2% on (b) …", and
	// won[variant] those at ruleMargin or more.
	gains := map[string][]string{}
	won := map[string][]string{}
	for _, fg := range figs {
		name := fmt.Sprintf("(%s) %s", fg.Letter, fg.Name)
		for i, row := range fg.rows(paths) {
			label := ""
			if i == 0 {
				label = name
			}
			paired, better, gain := "", "", ""
			if row.Paired > 0 {
				paired = fmt.Sprintf("%s [%s, %s]", fg.signed(row.Diff), fg.signed(row.DiffLo), fg.signed(row.DiffHi))
				better = fmt.Sprintf("%d of %d", row.Better, row.Paired)
				gain = fmtPercent(row.Gain)
				if fg.Rule && !math.IsNaN(row.Gain) {
					gains[row.Target] = append(gains[row.Target], gain+" on "+name)
					if row.Gain >= ruleMargin {
						won[row.Target] = append(won[row.Target], name)
					}
				}
			}
			p("| %s | %s | %d | %s [%s, %s] | %s | %s | %s |\n", label, row.Target, row.Runs,
				fg.value(row.Median), fg.value(row.Lo), fg.value(row.Hi), paired, better, gain)
		}
	}
	var missing []string
	for _, m := range []struct{ letter, what string }{
		{"a", "(a) needs the overhead section's saturation phase"},
		{"b", "(b) and (c) need a fixed rate in the overhead section (-rates 1000)"},
		{"d", "(d) needs the footprint section"},
		{"e", "(e) needs the overhead section"},
	} {
		if !slices.ContainsFunc(figs, func(fg variantFigure) bool { return fg.Letter == m.letter }) {
			missing = append(missing, m.what)
		}
	}
	if len(missing) > 0 {
		p("\nNot measured in this run: %s.\n", strings.Join(missing, "; "))
	}
	p("\nThe 15%% rule: fanout's own component stays only where fanout as built does at least %.0f%% better than the variant that swaps it for the standard library's (**fanout better by** above) on (b) proxy CPU per 10k requests or on (d) heap and stacks per open watch.\n\n", ruleMargin*100)
	for _, v := range r.Variants {
		switch {
		case len(gains[v]) == 0:
			p("- %s: no verdict, neither (b) nor (d) was measured beside fanout in the same run.\n", v)
		case len(won[v]) > 0:
			p("- %s: fanout better by %s: **at least %.0f%% on %s**.\n", v, strings.Join(gains[v], ", by "), ruleMargin*100, strings.Join(won[v], " and "))
		default:
			p("- %s: fanout better by %s: **under %.0f%% on each**.\n", v, strings.Join(gains[v], ", by "), ruleMargin*100)
		}
	}
}

// fmtPercent shows a share as a percentage, "—" for NaN.
func fmtPercent(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", x*100)
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
