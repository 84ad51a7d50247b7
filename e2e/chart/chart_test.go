// Package chart_test renders charts/fanout with helm (harness.Helm: helm
// built from the Go module proxy) and holds it to the kustomize manifests:
// with default values the chart makes the objects `kubectl kustomize
// manifests/` makes, field for field, and each value changes what it says.
// No cluster is needed.
package chart_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// helmLabels are the labels the chart puts on every object beside the
// manifests' own; the comparison with kustomize ignores them, wherever they
// are (metadata, selectors, pod templates).
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}

// object is one rendered object, decoded from YAML as JSON is.
type object = map[string]any

type rendered map[string]object // by kindName

func kindName(o object) string {
	meta, _ := o["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return fmt.Sprintf("%s %s/%s", o["kind"], ns, name)
}

func repo(t *testing.T, elem ...string) string {
	t.Helper()
	p, err := harness.RepoPath(elem...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func helm(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	p, err := harness.Helm(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// template runs helm template on chart for release in namespace and
// returns its output and error.
func template(t *testing.T, chart, release, namespace string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := harness.HelmCommand(ctx, helm(t), t.TempDir(), append([]string{"template", release, chart, "--namespace", namespace}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.String(), fmt.Errorf("helm template %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// render is template of charts/fanout, decoded; the test fails if helm does.
func render(t *testing.T, release, namespace string, args ...string) rendered {
	t.Helper()
	out, err := template(t, repo(t, "charts", "fanout"), release, namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func decode(t *testing.T, y string) rendered {
	t.Helper()
	objs := rendered{}
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(y), 4096)
	for {
		var o object
		err := d.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("decoding rendered YAML: %v\n%s", err, y)
		}
		if len(o) == 0 {
			continue
		}
		k := kindName(o)
		if _, dup := objs[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		objs[k] = o
	}
}

// kustomize builds each directory with kustomize's library (what kubectl
// kustomize runs) and returns their objects together.
func kustomize(t *testing.T, dirs ...string) rendered {
	t.Helper()
	all := rendered{}
	for _, dir := range dirs {
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		y, err := m.AsYaml()
		if err != nil {
			t.Fatal(err)
		}
		for k, o := range decode(t, string(y)) {
			all[k] = o
		}
	}
	return all
}

// overlay writes a kustomization of its own in a temporary directory,
// with %[1]s replaced by the path of manifests/ from there, and returns
// the directory.
func overlay(t *testing.T, kustomization string) string {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, repo(t, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(fmt.Sprintf(kustomization, rel)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stripHelmLabels deletes helmLabels from every map in v.
func stripHelmLabels(v any) {
	switch v := v.(type) {
	case map[string]any:
		for _, l := range helmLabels {
			delete(v, l)
		}
		for k, e := range v {
			stripHelmLabels(e)
			// A labels map that held only helm's labels.
			if m, ok := e.(map[string]any); ok && len(m) == 0 && k == "labels" {
				delete(v, k)
			}
		}
	case []any:
		for _, e := range v {
			stripHelmLabels(e)
		}
	}
}

// TestChartMatchesKustomize: with default values the chart renders the
// objects of `kubectl kustomize manifests/` (release fanout in
// fanout-system), and with pki.mode=files, networkPolicy and monitoring
// those of the matching kustomize component or directory; only helm's own
// labels differ.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// kustomize returns the directories whose objects the chart must make.
		kustomize func(t *testing.T) []string
	}{
		{"defaults", nil, func(t *testing.T) []string { return []string{repo(t, "manifests")} }},
		{"pki files", []string{"--set", "pki.mode=files"}, func(t *testing.T) []string {
			return []string{overlay(t, "resources: [%[1]s/injector]\ncomponents: [%[1]s/injector/files-pki]\n")}
		}},
		{"networkpolicy", []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiserverCIDRs={192.0.2.0/24}"}, func(t *testing.T) []string {
			return []string{overlay(t, "resources: [%[1]s/injector]\ncomponents: [%[1]s/injector/networkpolicy]\n")}
		}},
		{"monitoring", []string{"--set", "monitoring.podMonitor=true", "--set", "monitoring.prometheusRule=true", "--set", "monitoring.dashboard=true"}, func(t *testing.T) []string {
			// The chart puts them in the release's namespace; the
			// manifests leave that to kubectl's.
			return []string{repo(t, "manifests"), overlay(t, "namespace: fanout-system\nresources: [%[1]s/monitoring]\n")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, "fanout", "fanout-system", tc.args...)
			want := kustomize(t, tc.kustomize(t)...)
			var gotKeys, wantKeys []string
			for k, o := range got {
				stripHelmLabels(o)
				gotKeys = append(gotKeys, k)
			}
			for k := range want {
				wantKeys = append(wantKeys, k)
			}
			slices.Sort(gotKeys)
			slices.Sort(wantKeys)
			if d := cmp.Diff(wantKeys, gotKeys); d != "" {
				t.Errorf("the chart's objects differ from kustomize's (-kustomize +chart):\n%s", d)
			}
			for _, k := range wantKeys {
				if g, ok := got[k]; ok {
					if d := cmp.Diff(want[k], g); d != "" {
						t.Errorf("%s differs (-kustomize +chart):\n%s", k, d)
					}
				}
			}
		})
	}
}

// TestMonitoringFilesMatchManifests: the chart's copies of
// manifests/monitoring (helm reads only files inside the chart) are the
// same bytes.
func TestMonitoringFilesMatchManifests(t *testing.T) {
	for _, f := range []string{"podmonitor.yaml", "injector-podmonitor.yaml", "prometheusrule.yaml", "grafana-dashboard.json"} {
		want, err := os.ReadFile(repo(t, "manifests", "monitoring", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(repo(t, "charts", "fanout", "files", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/fanout/files/%s differs from manifests/monitoring/%s: copy it over (cp manifests/monitoring/%s charts/fanout/files/)", f, f, f)
		}
	}
}

// TestChartLint: helm lint --strict passes, with defaults and with the
// other PKI mode.
func TestChartLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "pki.mode=files"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := harness.HelmCommand(ctx, helm(t), t.TempDir(), append([]string{"lint", "--strict", repo(t, "charts", "fanout")}, args...)...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("helm lint --strict %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func get[T any](t *testing.T, objs rendered, key string) *T {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		keys := make([]string, 0, len(objs))
		for k := range objs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("no %s among the rendered objects:\n%s", key, strings.Join(keys, "\n"))
	}
	v := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

func injector(t *testing.T, objs rendered, key string) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := get[appsv1.Deployment](t, objs, key)
	return d, &d.Spec.Template.Spec.Containers[0]
}

func valuesFile(t *testing.T, y string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantArgs(t *testing.T, c *corev1.Container, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(c.Args, w) {
			t.Errorf("injector arguments lack %s: %q", w, c.Args)
		}
	}
}

const defaultDeployment = "Deployment fanout-system/fanout-injector"
