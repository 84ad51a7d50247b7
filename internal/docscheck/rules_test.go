package docscheck

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// ruleFile is manifests/monitoring/prometheusrule.yaml as far as the test
// reads it.
type ruleFile struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// kubeStateMetrics are the series of other exporters the rules may use:
// Prometheus' own up, and kube-state-metrics' pod series, all of them in
// its default set (kube_pod_labels carries a pod's labels only for those
// its --metric-labels-allowlist names).
var kubeStateMetrics = []string{
	"up",
	"kube_pod_labels",
	"kube_pod_info",
	"kube_pod_status_phase",
	"kube_pod_container_info",
	"kube_pod_init_container_info",
	"kube_pod_container_status_restarts_total",
	"kube_pod_init_container_status_restarts_total",
}

// promqlFunctions are the PromQL functions and aggregations the rules may
// call; a name outside it is most likely a typo.
var promqlFunctions = []string{
	"abs", "absent", "absent_over_time", "avg", "avg_over_time", "ceil", "clamp_min", "count", "count_over_time",
	"delta", "deriv", "floor", "histogram_quantile", "increase", "irate", "label_replace", "max", "max_over_time",
	"min", "min_over_time", "quantile", "rate", "round", "sum", "sum_over_time", "time", "topk", "vector",
}

// promqlKeywords are the words of PromQL that are neither metrics nor
// functions.
var promqlKeywords = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}

var identRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)

// metricsOf returns the metric names an expression selects and checks its
// brackets, strings and function names: the part of PromQL parsing a rule
// file gets wrong by hand. Label names in {...}, by/on/without/ignoring
// lists and group_left/right lists, and durations in [...] are skipped.
func metricsOf(expr string) ([]string, error) {
	var metrics, stack []string
	skipList := false // in the (...) after by, on, without, ignoring, group_*
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := strings.IndexByte(expr[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			i += j + 2
			continue
		case c == '(' || c == '{' || c == '[':
			stack = append(stack, string(c))
			if c == '(' && skipList {
				stack[len(stack)-1] = "list"
				skipList = false
			}
		case c == ')' || c == '}' || c == ']':
			want := map[byte]string{')': "(", '}': "{", ']': "["}[c]
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced %q at offset %d", c, i)
			}
			top := stack[len(stack)-1]
			if top != want && !(top == "list" && c == ')') {
				return nil, fmt.Errorf("%q at offset %d closes %q", c, i, top)
			}
			stack = stack[:len(stack)-1]
		case c >= '0' && c <= '9':
			// A number or a duration such as 5m or 1.8: digits, dots and
			// unit letters.
			for i < len(expr) && (expr[i] >= '0' && expr[i] <= '9' || expr[i] == '.' || strings.IndexByte("smhdwye", expr[i]) >= 0) {
				i++
			}
			continue
		default:
			id := identRE.FindString(expr[i:])
			if id == "" {
				i++
				continue
			}
			i += len(id)
			inner := ""
			if len(stack) > 0 {
				inner = stack[len(stack)-1]
			}
			rest := strings.TrimLeft(expr[i:], " \t\n")
			switch {
			case inner == "{" || inner == "[" || inner == "list":
				// a label name or a duration unit
			case slices.Contains(promqlKeywords, id):
				skipList = slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, id) && strings.HasPrefix(rest, "(")
			case slices.Contains(promqlFunctions, id):
				// a call; an aggregation's by (...) may come first
			case strings.HasPrefix(rest, "("):
				if !slices.Contains(promqlFunctions, id) {
					return nil, fmt.Errorf("unknown function %s", id)
				}
			default:
				metrics = append(metrics, id)
			}
			continue
		}
		i++
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	if len(metrics) == 0 {
		return nil, fmt.Errorf("selects no metric")
	}
	return metrics, nil
}

// TestAlertRules reads manifests/monitoring/prometheusrule.yaml and checks
// every rule: its expression's brackets, strings and function names
// (metricsOf), and every metric it selects, which must be documented in
// docs/metrics.md (fanout's and fanout-injector's) or be one of
// kubeStateMetrics. A renamed metric, or a rule naming one that was never
// exported, fails here instead of silently never firing.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../../manifests/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := func(m string) bool {
		return regexp.MustCompile(`\b` + regexp.QuoteMeta(m) + `\b`).Match(doc)
	}
	rules := 0
	for _, g := range f.Spec.Groups {
		for _, r := range g.Rules {
			rules++
			name := g.Name + "/" + r.Alert
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s: a rule needs alert and expr", name)
				continue
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", name, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description", name)
			}
			metrics, err := metricsOf(r.Expr)
			if err != nil {
				t.Errorf("%s: %v in\n%s", name, err, r.Expr)
				continue
			}
			for _, m := range metrics {
				if strings.HasPrefix(m, "fanout_") && !documented(m) {
					t.Errorf("%s uses %s, which docs/metrics.md does not list: a typo, or an undocumented metric", name, m)
				}
				if !strings.HasPrefix(m, "fanout_") && !slices.Contains(kubeStateMetrics, m) {
					t.Errorf("%s uses %s, neither fanout's nor a known kube-state-metrics series (kubeStateMetrics)", name, m)
				}
			}
		}
	}
	if rules == 0 {
		t.Fatal("no rules read from prometheusrule.yaml")
	}
}

// TestMetricsOf holds the expression reader to what it must catch.
func TestMetricsOf(t *testing.T) {
	for _, tc := range []struct {
		expr, want, err string
	}{
		{expr: `sum by (namespace, pod) (rate(fanout_requests_total{code=~"5.."}[5m])) > 0.1`, want: "fanout_requests_total"},
		{expr: `absent(up{job="fanout-injector"} == 1)`, want: "up"},
		{expr: `a unless on (namespace, pod) b and c{x="y"} == 1`, want: "a b c"},
		{expr: `min by (kind) (x) - time() < 7 * 24 * 3600`, want: "x"},
		{expr: `sum(rate(x[5m])`, err: `unclosed "("`},
		{expr: `sum(rate(x[5m)))`, err: `')' at offset 13 closes "["`},
		{expr: `rat(x[5m])`, err: "unknown function rat"},
		{expr: `x{a="b}`, err: "unterminated string"},
		{expr: `time()`, err: "selects no metric"},
	} {
		got, err := metricsOf(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("metricsOf(%q) = %v, %v; want error %q", tc.expr, got, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("metricsOf(%q) = %v, %v; want %s", tc.expr, got, err, tc.want)
		}
	}
}
