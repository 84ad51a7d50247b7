package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/cost"
)

// Snapshot is what /debug/endpoints serves.
type Snapshot struct {
	Ready     bool                      `json:"ready"`
	Endpoints []balancer.EndpointStatus `json:"endpoints"`
}

// FetchSnapshot reads /debug/endpoints from the admin server at addr
// (host:port). A host left empty (":7081", the flag's default) means
// 127.0.0.1: the endpoint answers loopback clients only.
func FetchSnapshot(ctx context.Context, c *http.Client, addr string) (Snapshot, error) {
	return fetch[Snapshot](ctx, c, addr, document{
		path: "/debug/endpoints", name: "fanout endpoint snapshot", subject: "the endpoint list",
		command: "fanout status", limit: 4 << 20,
	})
}

// FetchCost reads /debug/cost, the cost table, from the admin server at
// addr as FetchSnapshot does. A table that is off answers capacity 0; a
// 404 means a fanout without the table.
func FetchCost(ctx context.Context, c *http.Client, addr string) (cost.Snapshot, error) {
	return fetch[cost.Snapshot](ctx, c, addr, document{
		path: "/debug/cost", name: "fanout cost table", subject: "the cost table",
		command: "fanout top", limit: 64 << 20,
		notFound: "this fanout has no cost table (a version older than fanout top, or the table is off); upgrade the sidecar or start it with --cost-table-size above 0",
	})
}

// document is a JSON page of the admin server, as fetch reads it.
type document struct {
	path string
	// name is what the page is, for an answer that does not decode;
	// subject names it in a sentence.
	name, subject string
	// command reads the page; a 403 says to run it in the pod.
	command string
	// limit is the most bytes read of the body.
	limit int64
	// notFound explains a 404, "" to show the body.
	notFound string
}

// fetch GETs d from the admin server at addr and decodes it into a T. Its
// errors say what to do: check --admin-address, run the command in the pod
// (403: /debug answers loopback clients only), or d.notFound.
func fetch[T any](ctx context.Context, c *http.Client, addr string, d document) (T, error) {
	var v T
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return v, fmt.Errorf("--admin-address %q: %v; expected host:port such as 127.0.0.1:7081", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // the admin server's wildcard default; /debug answers loopback only
	}
	u := "http://" + net.JoinHostPort(host, port) + d.path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return v, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return v, fmt.Errorf("reading %s: %w (is fanout running with --admin-address %s?)", u, err, addr)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, d.limit))
	if err != nil {
		return v, fmt.Errorf("reading %s: %w", u, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusForbidden:
		return v, fmt.Errorf("%s answered %s: %s answers loopback clients only; run %s in the pod: kubectl exec -it POD -c fanout -- %s", u, resp.Status, d.subject, d.command, d.command)
	case resp.StatusCode == http.StatusNotFound && d.notFound != "":
		return v, fmt.Errorf("%s answered %s: %s", u, resp.Status, d.notFound)
	default:
		return v, fmt.Errorf("%s answered %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("%s: not a %s: %w", u, d.name, err)
	}
	return v, nil
}

// StatusTable renders cur as a table. With prev (the snapshot taken
// elapsed earlier) the share and rate are those of the requests finished
// in between, so a change shows at once; without it they count since
// fanout started.
func StatusTable(w io.Writer, cur Snapshot, prev *Snapshot, elapsed time.Duration) error {
	before := map[string]balancer.EndpointStatus{}
	if prev != nil {
		for _, e := range prev.Endpoints {
			before[e.Address] = e
		}
	}
	delta := func(e balancer.EndpointStatus) (req, errs uint64) {
		p, ok := before[e.Address]
		if !ok || p.RequestsTotal > e.RequestsTotal || p.ErrorsTotal > e.ErrorsTotal {
			// No earlier snapshot, an endpoint seen for the first time
			// (its counters start at zero), or counters that went back
			// (fanout restarted): everything counts.
			return e.RequestsTotal, e.ErrorsTotal
		}
		return e.RequestsTotal - p.RequestsTotal, e.ErrorsTotal - p.ErrorsTotal
	}
	var total uint64
	for _, e := range cur.Endpoints {
		r, _ := delta(e)
		total += r
	}
	window := "since start"
	if prev != nil {
		window = "last " + elapsed.Round(100*time.Millisecond).String()
	}
	ready := "ready"
	if !cur.Ready {
		ready = "NOT READY: no usable kube-apiserver endpoint"
	}
	if _, err := fmt.Fprintf(w, "fanout %s, %d endpoints, share and errors over the %s\n", ready, len(cur.Endpoints), window); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "ENDPOINT\tSTATE\tSHARE\tREQUESTS\tERRORS\tINFLIGHT SHORT\tINFLIGHT LONG\tLATENCY SCORE\tVERSION\tNOTE"
	if prev != nil {
		header = "ENDPOINT\tSTATE\tSHARE\tREQ/S\tERRORS\tINFLIGHT SHORT\tINFLIGHT LONG\tLATENCY SCORE\tVERSION\tNOTE"
	}
	fmt.Fprintln(tw, header)
	for _, e := range cur.Endpoints {
		r, errs := delta(e)
		share := "-"
		if total > 0 {
			share = fmt.Sprintf("%.1f%%", float64(r)*100/float64(total))
		}
		count := fmt.Sprintf("%d", r)
		if prev != nil && elapsed > 0 {
			count = fmt.Sprintf("%.1f", float64(r)/elapsed.Seconds())
		}
		var note []string
		if e.EjectedUntil != "" {
			note = append(note, "ejected until "+e.EjectedUntil)
		}
		if e.ConsecutiveFailures > 0 {
			note = append(note, fmt.Sprintf("%d consecutive failures", e.ConsecutiveFailures))
		}
		if !e.ProbeReady {
			note = append(note, "/readyz failing")
		}
		if e.Draining {
			note = append(note, "draining")
		}
		version := e.Version
		if version == "" {
			version = "-" // unknown, or skew routing off
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.2f\t%s\t%s\n",
			e.Address, e.State, share, count, errs, e.InflightShort, e.InflightLong, e.LatencyScore, version, strings.Join(note, ", "))
	}
	return tw.Flush()
}
