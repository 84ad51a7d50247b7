package top

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fanout-dev/fanout/components/cost"
)

// SortKey is the column the rows are sorted by, largest first.
type SortKey int

const (
	ByRequests SortKey = iota // requests/s
	ByBytes                   // bytes/s received and sent
	ByP99                     // p99 latency
	ByErrors                  // errors/s
)

// SortKeys maps the --sort names to their keys; Key is the key press.
var SortKeys = []struct {
	Name string
	Key  byte
	By   SortKey
}{{"requests", 'r', ByRequests}, {"bytes", 'b', ByBytes}, {"p99", 'p', ByP99}, {"errors", 'e', ByErrors}}

func (s SortKey) String() string {
	for _, k := range SortKeys {
		if k.By == s {
			return k.Name
		}
	}
	return fmt.Sprintf("SortKey(%d)", int(s))
}

// label is how the header names the sort.
func (s SortKey) label() string {
	return [...]string{"requests/s", "bytes/s", "p99", "errors/s"}[s]
}

func (s SortKey) value(r Rates) float64 {
	switch s {
	case ByBytes:
		return r.BytesReceived + r.BytesSent
	case ByP99:
		if math.IsNaN(r.P99) {
			return -1 // no short request: below every latency
		}
		return r.P99
	case ByErrors:
		return r.Errors
	}
	return r.Requests
}

// Sort orders rows by s, largest first; ties by requests/s, then by key,
// so that the order is stable from one frame to the next.
func Sort(rows []Rates, s SortKey) {
	slices.SortStableFunc(rows, func(a, b Rates) int {
		if c := cmp.Compare(s.value(b), s.value(a)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return strings.Compare(keyString(a.Key), keyString(b.Key))
	})
}

// Frame is how to draw a view.
type Frame struct {
	Sort SortKey
	// Width and Height are the terminal's; 0 means unlimited (a pipe).
	Width, Height int
	// Keys adds the key help to the header (interactive only).
	Keys bool
	// Note is an extra header line, such as a failed refresh.
	Note string
}

// Render is the table for the rates between prev (nil on the first look)
// and cur.
func Render(prev *Snapshot, cur Snapshot, f Frame) string {
	return Table(Compute(prev, cur), f)
}

// column is a numeric column of the table. Columns with a higher drop go
// first when the terminal is narrow.
type column struct {
	title string
	width int
	drop  int
	cell  func(Rates) string
}

var columns = []column{
	{"REQ/S", 7, 0, func(r Rates) string { return rate(r.Requests) }},
	{"ERR/S", 6, 4, func(r Rates) string { return rate(r.Errors) }},
	{"ERR%", 6, 2, func(r Rates) string { return percent(r.ErrorRatio, r.Delta.Requests > 0) }},
	{"RETRY/S", 7, 6, func(r Rates) string { return rate(r.Retries) }},
	{"RX B/S", 7, 1, func(r Rates) string { return bytes(r.BytesReceived) }},
	{"TX B/S", 7, 5, func(r Rates) string { return bytes(r.BytesSent) }},
	{"P99", 7, 1, func(r Rates) string { return seconds(r.P99) }},
	{"WATCHES", 7, 3, func(r Rates) string { return fmt.Sprint(r.WatchesOpen) }},
	{"EV/S", 6, 5, func(r Rates) string { return rate(r.WatchEvents) }},
}

// Text columns: their least width before numeric columns are dropped.
const (
	minComponent = 16
	minResource  = 12
	scopeWidth   = 7
)

// Table draws v: a header (window, sort, table, totals, one line per
// apiserver with its share), then the rows sorted by f.Sort, as many as
// fit f.Height; the rest are summed up on the last line. Lines are cut to
// f.Width, numeric columns dropped first when it is narrow.
func Table(v View, f Frame) string {
	var b strings.Builder
	window := "over the last " + v.Window.Round(100*time.Millisecond).String()
	if v.SinceStart {
		window = "averaged since the table started (" + v.Since.UTC().Format(time.RFC3339) + ") until the first refresh"
	}
	fmt.Fprintf(&b, "fanout top: sorted by %s, rates %s\n", f.Sort.label(), window)
	if f.Keys {
		b.WriteString("keys: r requests/s  b bytes/s  p p99  e errors/s  q quit\n")
	}
	if f.Note != "" {
		b.WriteString(f.Note + "\n")
	}
	fmt.Fprintf(&b, "cost table: %d keys of %d, %d evicted into \"other\"; p99 interpolated within histogram buckets like histogram_quantile\n", v.Keys, v.Capacity, v.Evictions)
	t := v.Total
	fmt.Fprintf(&b, "total: %s req/s, %s err/s (%s), %s retries/s, received %sB/s, sent %sB/s, p99 %s, %d watches, %s events/s\n",
		rate(t.Requests), rate(t.Errors), percent(t.ErrorRatio, t.Delta.Requests > 0), rate(t.Retries),
		bytes(t.BytesReceived), bytes(t.BytesSent), seconds(t.P99), t.WatchesOpen, rate(t.WatchEvents))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, e := range v.Endpoints {
		note := ""
		if e.EjectedUntil != "" {
			note = "ejected until " + e.EjectedUntil
		}
		fmt.Fprintf(tw, "apiserver %s\t%s\tshare %s\t%s req/s\tin flight %d short, %d long\tlatency score %.2f\t%s\n",
			e.Address, e.State, percent(e.Share, !math.IsNaN(e.Share)), rate(e.Requests), e.InflightShort, e.InflightLong, e.LatencyScore, note)
	}
	_ = tw.Flush()
	header := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")

	rows := slices.Clone(v.Rows)
	Sort(rows, f.Sort)
	// Room for the column titles and at least one row; below that the
	// header is cut from its end.
	shown := len(rows)
	if f.Height > 0 {
		if len(header)+2 > f.Height {
			header = header[:max(f.Height-2, 0)]
		}
		if room := f.Height - len(header) - 1; room < shown {
			shown = max(room-1, 0) // the last line sums up the rest
		}
	}
	lines := append(header, tableLines(rows[:shown], f.Width)...)
	if rest := rows[shown:]; len(rest) > 0 {
		var sum cost.RowSnapshot
		for _, r := range rest {
			add(&sum, r.Delta)
		}
		s := rates(cost.Key{}, sum, sum, v.Window)
		lines = append(lines, fmt.Sprintf("... %d more rows: %s req/s, %s err/s, received %sB/s", len(rest), rate(s.Requests), rate(s.Errors), bytes(s.BytesReceived)))
	}
	for i, l := range lines {
		lines[i] = cut(strings.TrimRight(l, " "), f.Width)
	}
	return strings.Join(lines, "\n") + "\n"
}

// tableLines lays out the column titles and rows in width (0: unlimited).
func tableLines(rows []Rates, width int) []string {
	verbW, compW, resW := len("VERB"), len("COMPONENT"), len("RESOURCE")
	for _, r := range rows {
		verbW = max(verbW, utf8.RuneCountInString(r.Verb))
		compW = max(compW, utf8.RuneCountInString(r.Component))
		resW = max(resW, utf8.RuneCountInString(resourcePath(r.Key)))
	}
	cols := slices.Clone(columns)
	if width > 0 {
		numeric := func() int {
			n := 0
			for _, c := range cols {
				n += c.width + 1
			}
			return n
		}
		fixed := func() int { return numeric() + verbW + 1 + scopeWidth + 1 + 1 }
		for fixed()+minComponent+minResource > width {
			i := -1
			for j, c := range cols {
				if c.drop > 0 && (i < 0 || c.drop > cols[i].drop) {
					i = j
				}
			}
			if i < 0 {
				break
			}
			cols = slices.Delete(cols, i, i+1)
		}
		room := max(width-fixed(), minComponent+minResource)
		// The resource gets what it needs up to half; the component the rest.
		resW = min(resW, max(room/2, minResource, room-compW))
		compW = min(compW, room-resW)
	}
	pad := func(s string, w int) string {
		s = cutMiddle(s, w)
		return s + strings.Repeat(" ", w-utf8.RuneCountInString(s))
	}
	line := func(comp, verb, res, scope string, cells []string) string {
		var b strings.Builder
		b.WriteString(pad(comp, compW) + " " + pad(verb, verbW) + " " + pad(res, resW) + " " + pad(scope, scopeWidth))
		for i, c := range cols {
			fmt.Fprintf(&b, " %*s", c.width, cells[i])
		}
		return b.String()
	}
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.title
	}
	out := []string{line("COMPONENT", "VERB", "RESOURCE", "SCOPE", titles)}
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = c.cell(r)
		}
		out = append(out, line(r.Component, r.Verb, resourcePath(r.Key), scope(r.Scope), cells))
	}
	return out
}

// cut shortens s to w runes, marking the cut with "…"; w 0 leaves it.
func cut(s string, w int) string {
	if w <= 0 || utf8.RuneCountInString(s) <= w {
		return s
	}
	r := []rune(s)
	return string(r[:w-1]) + "…"
}

// cutMiddle shortens s to w runes by taking out its middle: a component's
// program and the end of its controller's name, a resource's group and
// subresource, stay in sight.
func cutMiddle(s string, w int) string {
	r := []rune(s)
	if w <= 0 || len(r) <= w {
		return s
	}
	head := (w - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(w-1-head):])
}

func scope(s string) string {
	switch s {
	case cost.ScopeNamespaced:
		return "ns"
	case "":
		return "-"
	}
	return s
}

func rate(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x < 10:
		return fmt.Sprintf("%.2f", x)
	case x < 1000:
		return fmt.Sprintf("%.1f", x)
	case x < 1e6:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.1fM", x/1e6)
}

func percent(x float64, known bool) string {
	if !known {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", x*100)
}

// bytes is x in binary units: "512", "12.5Ki", "3.0Mi".
func bytes(x float64) string {
	for _, u := range []string{"", "Ki", "Mi", "Gi"} {
		if x < 1024 || u == "Gi" {
			if u == "" {
				return fmt.Sprintf("%.0f", x)
			}
			return fmt.Sprintf("%.1f%s", x, u)
		}
		x /= 1024
	}
	panic("unreachable")
}

func seconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 0.01:
		return fmt.Sprintf("%.1fms", s*1e3)
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1e3)
	}
	return fmt.Sprintf("%.2fs", s)
}

// JSONView is -o json: the rows sorted as asked, each with its rates and
// its cumulative counters, and the apiservers' shares.
type JSONView struct {
	Since           time.Time      `json:"since"`
	Now             time.Time      `json:"now"`
	IntervalSeconds float64        `json:"interval_seconds"`
	SinceStart      bool           `json:"since_start"`
	Capacity        int            `json:"capacity"`
	Evictions       int64          `json:"evictions"`
	Sort            string         `json:"sort"`
	Total           JSONRates      `json:"total"`
	Rows            []JSONRow      `json:"rows"`
	Endpoints       []JSONEndpoint `json:"endpoints"`
}

// JSONRates are a row's rates; P99Seconds is null when no short request
// finished in the interval.
type JSONRates struct {
	RequestsPerSecond      float64  `json:"requests_per_second"`
	ErrorsPerSecond        float64  `json:"errors_per_second"`
	ErrorRatio             float64  `json:"error_ratio"`
	RetriesPerSecond       float64  `json:"retries_per_second"`
	ReceivedBytesPerSecond float64  `json:"received_bytes_per_second"`
	SentBytesPerSecond     float64  `json:"sent_bytes_per_second"`
	P99Seconds             *float64 `json:"p99_seconds"`
	WatchesOpen            int64    `json:"watches_open"`
	WatchEventsPerSecond   float64  `json:"watch_events_per_second"`
}

// JSONRow is a key, its rates and its counters as /debug/cost gave them.
type JSONRow struct {
	cost.Key
	Rates      JSONRates        `json:"rates"`
	Cumulative cost.RowSnapshot `json:"cumulative"`
}

// JSONEndpoint is an apiserver as /debug/endpoints gave it, with its share
// (null when no request finished) and rate over the interval.
type JSONEndpoint struct {
	Address           string   `json:"address"`
	State             string   `json:"state"`
	Share             *float64 `json:"share"`
	RequestsPerSecond float64  `json:"requests_per_second"`
	InflightShort     int64    `json:"inflight_short"`
	InflightLong      int64    `json:"inflight_long"`
	LatencyScore      float64  `json:"latency_score"`
	RequestsTotal     uint64   `json:"requests_total"`
	ErrorsTotal       uint64   `json:"errors_total"`
}

// JSON is v for -o json, rows sorted by s.
func JSON(v View, s SortKey) ([]byte, error) {
	rows := slices.Clone(v.Rows)
	Sort(rows, s)
	out := JSONView{
		Since: v.Since, Now: v.Now, IntervalSeconds: v.Window.Seconds(), SinceStart: v.SinceStart,
		Capacity: v.Capacity, Evictions: v.Evictions, Sort: s.String(), Total: jsonRates(v.Total),
		Rows: make([]JSONRow, 0, len(rows)), Endpoints: make([]JSONEndpoint, 0, len(v.Endpoints)),
	}
	for _, r := range rows {
		out.Rows = append(out.Rows, JSONRow{Key: r.Key, Rates: jsonRates(r), Cumulative: r.Cumulative})
	}
	for _, e := range v.Endpoints {
		out.Endpoints = append(out.Endpoints, JSONEndpoint{
			Address: e.Address, State: e.State, Share: orNull(e.Share), RequestsPerSecond: e.Requests,
			InflightShort: e.InflightShort, InflightLong: e.InflightLong, LatencyScore: e.LatencyScore,
			RequestsTotal: e.RequestsTotal, ErrorsTotal: e.ErrorsTotal,
		})
	}
	return json.MarshalIndent(out, "", "  ")
}

func jsonRates(r Rates) JSONRates {
	return JSONRates{
		RequestsPerSecond: r.Requests, ErrorsPerSecond: r.Errors, ErrorRatio: r.ErrorRatio, RetriesPerSecond: r.Retries,
		ReceivedBytesPerSecond: r.BytesReceived, SentBytesPerSecond: r.BytesSent, P99Seconds: orNull(r.P99),
		WatchesOpen: r.WatchesOpen, WatchEventsPerSecond: r.WatchEvents,
	}
}

func orNull(x float64) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	return &x
}
