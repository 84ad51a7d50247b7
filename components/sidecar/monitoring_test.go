package sidecar

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"sigs.k8s.io/yaml"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/engine"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// describedNames records the name of every metric a collector registered
// through the Registerer declares, whether or not it has a sample yet: a
// counter vector shows in a scrape only after its first increment.
type describedNames struct {
	prometheus.Registerer
	mu    sync.Mutex
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describedNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	d.mu.Lock()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	d.mu.Unlock()
	return d.Registerer.Register(c)
}

func (d *describedNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// runSidecarWithTraffic starts the whole sidecar, sends it successful and
// failing requests, and returns its registry and every declared metric name.
func runSidecarWithTraffic(t *testing.T) (*prometheus.Registry, map[string]bool) {
	t.Helper()
	rec := &describedNames{names: map[string]bool{}}
	var reg *prometheus.Registry
	f := startSidecar(t, "", "least-request",
		fx.Decorate(func(r prometheus.Registerer) prometheus.Registerer { rec.Registerer = r; return rec }),
		fx.Populate(&reg))
	for _, path := range []string{"/api/v1/namespaces/default/configmaps/x", "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1", "/missing"} {
		for range 5 {
			resp, err := http.Get("http://" + f.proxy.Addr().String() + path)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, mf := range fams {
		rec.names[mf.GetName()] = true
	}
	return reg, rec.names
}

// TestMetricsLint runs client_golang's linter (naming, units, help
// strings, counters ending in _total) over everything /metrics serves.
func TestMetricsLint(t *testing.T) {
	reg, names := runSidecarWithTraffic(t)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	for n := range names {
		if !strings.HasPrefix(n, "fanout_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("metric %s lacks the fanout_ prefix", n)
		}
	}
	if !names["fanout_build_info"] {
		t.Error("fanout_build_info is missing")
	}
}

// metricRef finds metric names in PromQL expressions: fanout's own and the
// process collector's.
var metricRef = regexp.MustCompile(`\b(?:fanout|process)_[a-z0-9_]+\b`)

// TestMonitoringReferencesExistingMetrics checks that the dashboard and
// the alerting rules in manifests/monitoring query only metrics fanout
// and fanout-injector's webhook declare, so a renamed metric cannot leave
// an empty panel or an alert that never fires.
func TestMonitoringReferencesExistingMetrics(t *testing.T) {
	_, names := runSidecarWithTraffic(t)
	injector := &describedNames{Registerer: prometheus.NewRegistry(), names: names}
	if _, err := webhook.NewMetrics(injector); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../manifests/monitoring/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no monitoring manifests found: %v", err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range metricRef.FindAllString(string(b), -1) {
			seen[ref] = true
			if names[ref] {
				continue
			}
			base := ref
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if base == ref || !names[base] {
				t.Errorf("%s references %s, which fanout does not export", filepath.Base(file), ref)
			}
		}
	}
	var refs []string
	for r := range seen {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	t.Logf("%d metrics referenced: %s", len(refs), strings.Join(refs, " "))
	if len(refs) < 10 {
		t.Errorf("only %d metric references found; did the manifests move?", len(refs))
	}
}

// costContract is the cost table's series (components/cost, docs/cost.md),
// and costLabels the labels they carry, plus namespace and pod, which
// Prometheus adds.
var (
	costContract = map[string]bool{
		"fanout_cost_requests_total": true, "fanout_cost_errors_total": true, "fanout_cost_retries_total": true,
		"fanout_cost_request_duration_seconds_sum": true, "fanout_cost_request_duration_seconds_count": true,
		"fanout_cost_sent_bytes_total": true, "fanout_cost_received_bytes_total": true,
		"fanout_cost_watches": true, "fanout_cost_watch_events_total": true,
		"fanout_cost_table_keys": true, "fanout_cost_table_evictions_total": true,
	}
	costLabels = map[string]bool{"component": true, "verb": true, "group": true, "resource": true, "scope": true, "class": true, "namespace": true, "pod": true}
)

var byClause = regexp.MustCompile(`\bby \(([^)]*)\)`)

// TestDashboardCostRow checks the "Who costs what" row of the dashboard:
// its panels query the cost table's series by the names and labels of
// the contract,; whether fanout declares each
// metric is TestMonitoringReferencesExistingMetrics' job.
func TestDashboardCostRow(t *testing.T) {
	b, err := os.ReadFile("../../manifests/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json is not valid JSON: %v", err)
	}
	// The row's panels follow it, up to the next row.
	row := -1
	for i, p := range dash.Panels {
		if p.Type == "row" && p.Title == "Who costs what" {
			row = i
		}
	}
	if row < 0 {
		t.Fatal(`no row "Who costs what" in the dashboard`)
	}
	used := map[string]bool{}
	panels := 0
	for _, p := range dash.Panels[row+1:] {
		if p.Type == "row" {
			break
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			cost := false
			for _, ref := range metricRef.FindAllString(target.Expr, -1) {
				if strings.HasPrefix(ref, "fanout_cost_") {
					cost = true
					used[ref] = true
					if !costContract[ref] {
						t.Errorf("panel %q queries %s, which is not in the cost table's contract", p.Title, ref)
					}
				}
			}
			for _, m := range byClause.FindAllStringSubmatch(target.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					if l = strings.TrimSpace(l); cost && !costLabels[l] {
						t.Errorf("panel %q groups the cost series by %q, a label they do not have", p.Title, l)
					}
				}
			}
		}
	}
	for _, want := range []string{"fanout_cost_requests_total", "fanout_cost_received_bytes_total", "fanout_cost_request_duration_seconds_sum", "fanout_cost_request_duration_seconds_count"} {
		if !used[want] {
			t.Errorf("the row does not query %s (requests/s by component, received bytes/s by resource, mean latency by component)", want)
		}
	}
	if panels < 4 {
		t.Errorf("the row has %d panels, want at least 4", panels)
	}
}

// TestMonitoringMetricsExistAtStart starts the sidecar, waits for its
// first endpoint set, and scrapes /metrics before any request: every
// metric that a shipped alerting rule or dashboard query names must be
// there already, with a series for every label value an expression
// selects by equality, or its panel shows "No data" and its alert cannot
// tell "nothing happened" from "not exported". It reads the rules and
// the dashboard as they are, so rules added later are covered too. The
// fanout_injector_* series are fanout-injector's: they are looked up in
// the scrape of a fresh registry of its webhook metrics instead.
func TestMonitoringMetricsExistAtStart(t *testing.T) {
	var (
		adm *admin.Server
		eng *engine.Engine
	)
	startSidecar(t, "", "least-request", fx.Populate(&adm, &eng))
	testkit.Wait(t, eng.Resolved(), "the engine's first endpoint set")
	resp, err := http.Get("http://" + adm.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	sidecar := parseSamples(string(body))
	injectorReg := prometheus.NewRegistry()
	if _, err := webhook.NewMetrics(injectorReg); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(injectorReg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	injector := parseSamples(rec.Body.String())
	samplesOf := func(name string) []map[string]string {
		if strings.HasPrefix(name, "fanout_injector_") {
			return injector[name]
		}
		return sidecar[name]
	}

	exprs := monitoringExprs(t)
	checked := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e.expr, -1) {
			if !checked[name] && len(samplesOf(name)) == 0 {
				t.Errorf("%s: %s is not in /metrics at start (no series before the first event); "+
					"initialise its known label values when the collector is made or the endpoint appears", e.where, name)
			}
			checked[name] = true
		}
		for _, m := range selectorRef.FindAllStringSubmatch(e.expr, -1) {
			name := m[1]
			for _, lm := range equalityMatcher.FindAllStringSubmatch(m[2], -1) {
				if !hasLabel(samplesOf(name), lm[1], lm[2]) {
					t.Errorf("%s: %s{%s=%q} has no series at start", e.where, name, lm[1], lm[2])
				}
			}
		}
	}
	var names []string
	for n := range checked {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d expressions, %d metrics checked: %s", len(exprs), len(names), strings.Join(names, " "))
	if len(exprs) < 20 || len(names) < 10 {
		t.Errorf("only %d expressions naming %d metrics found; did the manifests move?", len(exprs), len(names))
	}
}

var (
	// selectorRef is a metric name with its label matchers.
	selectorRef = regexp.MustCompile(`\b((?:fanout|process)_[a-z0-9_]+)\s*\{([^}]*)\}`)
	// equalityMatcher is one label="value" matcher (not =~, != or !~).
	equalityMatcher = regexp.MustCompile(`\b([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"`)
	// sampleLabel is one label of a sample line in the text format.
	sampleLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseSamples reads the text exposition format: the label sets of each
// sample name (histograms' _bucket, _sum and _count apart, as PromQL
// names them).
func parseSamples(text string) map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		labels := map[string]string{}
		if line[end] == '{' {
			if close := strings.LastIndexByte(line, '}'); close > end {
				for _, m := range sampleLabel.FindAllStringSubmatch(line[end+1:close], -1) {
					labels[m[1]] = m[2]
				}
			}
		}
		out[line[:end]] = append(out[line[:end]], labels)
	}
	return out
}

func hasLabel(series []map[string]string, name, value string) bool {
	for _, s := range series {
		if s[name] == value {
			return true
		}
	}
	return false
}

type monitoringExpr struct{ where, expr string }

// monitoringExprs returns every PromQL expression shipped in
// manifests/monitoring: the PrometheusRule's rules, the dashboard panels'
// queries (rows' nested panels included) and its variables' queries.
func monitoringExprs(t *testing.T) []monitoringExpr {
	t.Helper()
	var out []monitoringExpr
	b, err := os.ReadFile("../../manifests/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Name  string
				Rules []struct{ Alert, Record, Expr string }
			}
		}
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, monitoringExpr{"rule " + r.Alert + r.Record, r.Expr})
		}
	}
	b, err = os.ReadFile("../../manifests/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  json.RawMessage
	}
	var dash struct {
		Panels     json.RawMessage
		Templating struct {
			List []struct {
				Name  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		var panels []panel
		if err := json.Unmarshal(raw, &panels); err != nil {
			t.Fatalf("grafana-dashboard.json panels: %v", err)
		}
		for _, p := range panels {
			for _, target := range p.Targets {
				out = append(out, monitoringExpr{"panel " + strconv.Quote(p.Title), target.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		var q string
		if json.Unmarshal(v.Query, &q) == nil {
			out = append(out, monitoringExpr{"variable " + v.Name, q})
		}
	}
	return out
}
