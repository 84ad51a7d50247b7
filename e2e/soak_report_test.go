package e2e_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// What the soak measures besides its own clients' records: the
// apiservers' audit logs read as they grow, and the host fanout's memory
// and goroutines. Then the report: the summary, soak.json and soak.svg.

// The clients the audit tally counts, by index.
const (
	auditSoak  = iota // the soak user through the host fanout
	auditKCM          // the in-pod kube-controller-manager through its sidecar
	auditSched        // the in-pod kube-scheduler through its sidecar
	auditL4           // the L4 informers' user
	auditGroups
)

var auditGroupNames = [auditGroups]string{"soak client (fanout)", "kube-controller-manager (in-pod fanout)", "kube-scheduler (in-pod fanout)", "informers via L4"}

// soakBucket is the audit tally's time resolution.
const soakBucket = 30 * time.Second

// soakAudit reads every apiserver's audit log incrementally: the requests
// each served per client and bucket since the soak began, and the open
// watches of the soak user and of the L4 informers' user.
type soakAudit struct {
	cp           *harness.ControlPlane
	node         *harness.Node
	user, l4User string
	since        time.Time
	tails        []*harness.AuditTail
	open         [auditGroups][]map[string]time.Time // per client, per apiserver: audit ID -> watch start
	served       map[int][auditGroups][]int
}

func newSoakAudit(cp *harness.ControlPlane, node *harness.Node, user, l4User string) *soakAudit {
	a := &soakAudit{cp: cp, node: node, user: user, l4User: l4User, served: map[int][auditGroups][]int{}}
	for _, s := range cp.APIServers {
		a.tails = append(a.tails, &harness.AuditTail{Path: s.AuditLog})
		for _, g := range []int{auditSoak, auditL4} {
			a.open[g] = append(a.open[g], map[string]time.Time{})
		}
	}
	return a
}

func (a *soakAudit) group(e *harness.AuditEvent) int {
	switch u := e.User.Username; {
	case u == a.user:
		return auditSoak
	case u == a.l4User:
		return auditL4
	case harness.ControllerManagerUsers(u) && a.node.FromPod(e):
		return auditKCM
	case u == "system:kube-scheduler" && a.node.FromPod(e):
		return auditSched
	}
	return -1
}

// poll reads what the logs gained since the last poll.
func (a *soakAudit) poll() error {
	for i, t := range a.tails {
		_, err := t.Next(func(e *harness.AuditEvent) {
			g := a.group(e)
			if g < 0 {
				return
			}
			if open := a.open[g]; open != nil && e.Verb == "watch" {
				switch e.Stage {
				case "ResponseStarted":
					open[i][e.AuditID] = e.StageTimestamp
				case "ResponseComplete", "Panic":
					delete(open[i], e.AuditID)
				}
			}
			if a.since.IsZero() || e.StageTimestamp.Before(a.since) || !e.Served() || e.IsHealthProbe() {
				return
			}
			b := int(e.StageTimestamp.Sub(a.since) / soakBucket)
			row := a.served[b]
			if row[g] == nil {
				row[g] = make([]int, len(a.tails))
			}
			row[g][i]++
			a.served[b] = row
		})
		if err != nil {
			return fmt.Errorf("reading the audit log of apiserver %d: %w", i+1, err)
		}
	}
	return nil
}

// openWatches counts the watches of client g (auditSoak or auditL4) each
// apiserver holds now. A watch that began before the apiserver's current
// process did went with the old one (a SIGKILLed apiserver logs no end for
// its watches).
func (a *soakAudit) openWatches(g int) []int {
	out := make([]int, len(a.open[g]))
	for i, open := range a.open[g] {
		started := a.cp.APIServers[i].StartedAt()
		for id, at := range open {
			if at.Before(started) {
				delete(open, id)
				continue
			}
			out[i]++
		}
	}
	return out
}

// window sums the tally of group over buckets [from, to).
func (a *soakAudit) window(g, from, to int) []int {
	out := make([]int, len(a.tails))
	for b := from; b < to; b++ {
		for i, n := range a.served[b][g] {
			out[i] += n
		}
	}
	return out
}

// soakSample is one look at the host fanout and the clients' records.
type soakSample struct {
	At            float64 `json:"at_s"` // seconds since the soak began
	RSSMiB        float64 `json:"rss_mib"`
	Goroutines    float64 `json:"goroutines"`
	HeapMiB       float64 `json:"heap_inuse_mib"` // reported, not judged
	Reads         int     `json:"reads"`
	ReadFailures  int     `json:"read_failures"`
	Writes        int     `json:"writes"`
	WriteFailures int     `json:"write_failures"`
	// Watches and L4Watches are the open watches per apiserver of the
	// informers through fanout and through the L4 balancer.
	Watches   []int `json:"watches"`
	L4Watches []int `json:"l4_watches"`
}

// rssMiB reads a process's resident set size from /proc.
func rssMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// slope is the least-squares slope of y over x.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// svgPlot draws the soak over time in three panels sharing the time axis:
// the soak client's share of requests per apiserver (per 30 s), failed
// reads and writes (per 10 s), the host fanout's RSS and goroutines; the
// fault windows are shaded across all three and named at the top.
func svgPlot(r *soakReport, a *soakAudit) string {
	const w, left, right, panelH, gap, top = 1000.0, 60.0, 60.0, 160.0, 40.0, 40.0
	end := r.DurationS
	for _, s := range r.Samples {
		end = math.Max(end, s.At)
	}
	if end <= 0 {
		end = 1
	}
	x := func(t float64) float64 { return left + (w-left-right)*t/end }
	var b strings.Builder
	h := top + 3*panelH + 2*gap + 40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="16" font-size="13">fanout soak: seed %d, %s, %d faults</text>`+"\n", left, r.Seed, time.Duration(r.DurationS*float64(time.Second)).Round(time.Second), len(r.Faults))
	panelTop := func(p int) float64 { return top + float64(p)*(panelH+gap) }
	for _, f := range r.Faults {
		x0, x1 := x(f.StartS), x(f.EndS+r.GraceS)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#f4a261" fill-opacity="0.12"/>`+"\n", x0, top-12, x1-x0, h-top-28)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#e76f51" fill-opacity="0.25"/>`+"\n", x0, top-12, x(f.EndS)-x0, h-top-28)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="9">%s</text>`+"\n", x0+2, top-2, f.Kind)
	}
	axes := func(p int, label string, ymax float64, unit string) {
		y0 := panelTop(p)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", left, y0, w-left-right, panelH)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", left+4, y0+12, label)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.4g%s</text>`+"\n", left-4, y0+10, ymax, unit)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", left-4, y0+panelH)
	}
	line := func(p int, ymax float64, xs, ys []float64, color string) {
		if len(xs) == 0 || ymax <= 0 {
			return
		}
		var pts []string
		for i := range xs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(xs[i]), panelTop(p)+panelH*(1-math.Min(ys[i]/ymax, 1))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(pts, " "))
	}
	colors := []string{"#1d3557", "#2a9d8f", "#e63946"}

	// Panel 1: shares.
	axes(0, "soak client's requests per apiserver (share per 30 s; dashed: 33%)", 100, "%")
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", left, w-right, panelTop(0)+panelH*(1-1.0/3), panelTop(0)+panelH*(1-1.0/3))
	nb := int(end / soakBucket.Seconds())
	for i := range r.APIServers {
		var xs, ys []float64
		for bk := 0; bk <= nb; bk++ {
			c := a.window(auditSoak, bk, bk+1)
			if sumInts(c) == 0 {
				continue
			}
			xs = append(xs, min((float64(bk)+0.5)*soakBucket.Seconds(), end))
			ys = append(ys, 100*float64(c[i])/float64(sumInts(c)))
		}
		line(0, 100, xs, ys, colors[i%len(colors)])
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">apiserver %d</text>`+"\n", w-right+4, panelTop(0)+14*float64(i+1), colors[i%len(colors)], i+1)
	}

	// Panel 2: failures per 10 s.
	const fb = 10.0
	nf := int(end/fb) + 1
	reads, writes := make([]float64, nf), make([]float64, nf)
	for _, f := range r.ReadFailures {
		if i := int(f.Start.Sub(r.start).Seconds() / fb); i >= 0 && i < nf {
			reads[i]++
		}
	}
	for _, op := range r.WriteFailures {
		if i := int(op.Start.Sub(r.start).Seconds() / fb); i >= 0 && i < nf {
			writes[i]++
		}
	}
	fmax := 1.0
	for i := range reads {
		fmax = math.Max(fmax, math.Max(reads[i], writes[i]))
	}
	axes(1, "failed reads (red) and writes (blue) per 10 s", fmax, "")
	bw := (w - left - right) * fb / end / 2
	for i := range reads {
		for j, v := range []float64{reads[i], writes[i]} {
			if v == 0 {
				continue
			}
			hh := panelH * v / fmax
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
				x(float64(i)*fb)+float64(j)*bw, panelTop(1)+panelH-hh, bw, hh, []string{"#e63946", "#1d3557"}[j])
		}
	}

	// Panel 3: RSS and goroutines, each on its own scale.
	var ts, rss, gs []float64
	rmax, gmax := 1.0, 1.0
	for _, s := range r.Samples {
		ts, rss, gs = append(ts, s.At), append(rss, s.RSSMiB), append(gs, s.Goroutines)
		rmax, gmax = math.Max(rmax, s.RSSMiB), math.Max(gmax, s.Goroutines)
	}
	rmax, gmax = math.Ceil(rmax*1.2), math.Ceil(gmax*1.2)
	axes(2, "host fanout: RSS (blue, left) and goroutines (green, right)", rmax, " MiB")
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%.0f</text>`+"\n", w-right+4, panelTop(2)+10, gmax)
	line(2, rmax, ts, rss, colors[0])
	line(2, gmax, ts, gs, colors[1])
	ya := panelTop(2) + panelH + 16
	for s := 0.0; s <= end; s += tickStep(end) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(s), ya, time.Duration(s*float64(time.Second)).String())
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// tickStep is a round step for about ten ticks over end seconds.
func tickStep(end float64) float64 {
	for _, s := range []float64{15, 30, 60, 120, 300, 600, 1200, 1800, 3600} {
		if end/s <= 12 {
			return s
		}
	}
	return 7200
}

func sumInts(c []int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}
