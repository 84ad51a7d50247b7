package apis

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/fanout-dev/fanout/resolver"
)

// Two releases' resource.k8s.io, as in an upgrade that enables v1beta2:
// the new one serves deviceclasses in v1beta2 too, resourceslices in v1
// (served by it alone), and a verb and a subresource more on
// resourceclaims.
var (
	kindOf = func(g, v, k string) *metav1.GroupVersionKind {
		return &metav1.GroupVersionKind{Group: g, Version: v, Kind: k}
	}
	deviceClasses = func(v string) apidiscoveryv2.APIResourceDiscovery {
		return apidiscoveryv2.APIResourceDiscovery{Resource: "deviceclasses", SingularResource: "deviceclass", Scope: apidiscoveryv2.ScopeCluster,
			ResponseKind: kindOf("resource.k8s.io", v, "DeviceClass"), Verbs: []string{"get", "list", "watch", "create", "delete"}}
	}
	claimsOld = apidiscoveryv2.APIResourceDiscovery{Resource: "resourceclaims", SingularResource: "resourceclaim", Scope: apidiscoveryv2.ScopeNamespace,
		ResponseKind: kindOf("resource.k8s.io", "v1", "ResourceClaim"), Verbs: []string{"get", "list", "watch"},
		Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status", ResponseKind: kindOf("resource.k8s.io", "v1", "ResourceClaim"), Verbs: []string{"get"}}}}
	claimsNew = apidiscoveryv2.APIResourceDiscovery{Resource: "resourceclaims", SingularResource: "resourceclaim", Scope: apidiscoveryv2.ScopeNamespace,
		ResponseKind: kindOf("resource.k8s.io", "v1", "ResourceClaim"), Verbs: []string{"get", "list", "watch", "deletecollection"},
		Subresources: []apidiscoveryv2.APISubresourceDiscovery{
			{Subresource: "binding", ResponseKind: kindOf("resource.k8s.io", "v1", "ResourceClaim"), Verbs: []string{"create"}},
			{Subresource: "status", ResponseKind: kindOf("resource.k8s.io", "v1", "ResourceClaim"), Verbs: []string{"get"}},
		}}
	slices1 = apidiscoveryv2.APIResourceDiscovery{Resource: "resourceslices", SingularResource: "resourceslice", Scope: apidiscoveryv2.ScopeCluster,
		ResponseKind: kindOf("resource.k8s.io", "v1", "ResourceSlice"), Verbs: []string{"get", "list"}}

	widgets = func(group string) []apidiscoveryv2.APIVersionDiscovery {
		return []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
			{Resource: "widgets", Scope: apidiscoveryv2.ScopeCluster, ResponseKind: kindOf(group, "v1", "Widget"), Verbs: []string{"get"}}}}}
	}
	// Each release serves a group of its own too: where the new one goes
	// in the merged order is open.
	oldGroups = map[string][]apidiscoveryv2.APIVersionDiscovery{
		"old.example.com": widgets("old.example.com"),
		"resource.k8s.io": {{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{deviceClasses("v1"), claimsOld}}},
		"apps":            {{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Scope: apidiscoveryv2.ScopeNamespace, ResponseKind: kindOf("apps", "v1", "Deployment"), Verbs: []string{"get"}}}}},
	}
	newGroups = map[string][]apidiscoveryv2.APIVersionDiscovery{
		"resource.k8s.io": {
			{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{deviceClasses("v1"), claimsNew, slices1}},
			{Version: "v1beta2", Resources: []apidiscoveryv2.APIResourceDiscovery{deviceClasses("v1beta2")}},
		},
		"apps":            oldGroups["apps"],
		"new.example.com": widgets("new.example.com"),
	}
)

// aggregatedDocs returns s's aggregated /api and /apis, as kube-apiserver's
// handler encodes them.
func aggregatedDocs(t *testing.T, s http.Handler) (core, groups []byte) {
	t.Helper()
	get := func(path string) []byte {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("Accept", acceptAggregated)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", path, rec.Code)
		}
		return rec.Body.Bytes()
	}
	return get("/api"), get("/apis")
}

// mergeOf merges the documents of servers, in this order.
func mergeOf(t *testing.T, servers ...http.Handler) *merged {
	t.Helper()
	var core, groups [][]byte
	for _, s := range servers {
		c, g := aggregatedDocs(t, s)
		core, groups = append(core, c), append(groups, g)
	}
	m, err := newMerged(core, groups)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func decodeList(t *testing.T, body []byte) apidiscoveryv2.APIGroupDiscoveryList {
	t.Helper()
	var l apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("the merged document does not decode as apidiscovery.k8s.io/v2: %v\n%s", err, body)
	}
	return l
}

func findResource(l apidiscoveryv2.APIGroupDiscoveryList, group, version, resource string) *apidiscoveryv2.APIResourceDiscovery {
	for _, g := range l.Items {
		for _, v := range g.Versions {
			for i, r := range v.Resources {
				if g.Name == group && v.Version == version && r.Resource == resource {
					return &v.Resources[i]
				}
			}
		}
	}
	return nil
}

// TestMergeUnion: the merged /apis lists every group/version, resource and
// subresource either release serves, including those one serves alone,
// and a resource served differently gets the union of its verbs and
// subresources, sorted, as upstream's peer-aggregated discovery merges.
func TestMergeUnion(t *testing.T) {
	m := mergeOf(t, newFakeAPIServer("v1.36.4", oldGroups), newFakeAPIServer("v1.37.2", newGroups))
	l := decodeList(t, m.groups.body)
	if l.Kind != aggregatedKind || l.APIVersion != "apidiscovery.k8s.io/v2" {
		t.Errorf("kind %q apiVersion %q", l.Kind, l.APIVersion)
	}
	for _, want := range [][3]string{
		{"resource.k8s.io", "v1beta2", "deviceclasses"}, // the new release's alone
		{"resource.k8s.io", "v1", "resourceslices"},     // likewise
		{"resource.k8s.io", "v1", "deviceclasses"},
		{"apps", "v1", "deployments"},
	} {
		if findResource(l, want[0], want[1], want[2]) == nil {
			t.Errorf("%s/%s %s missing from the merged discovery", want[0], want[1], want[2])
		}
	}
	claims := findResource(l, "resource.k8s.io", "v1", "resourceclaims")
	if claims == nil {
		t.Fatal("resourceclaims missing")
	}
	if want := []string{"deletecollection", "get", "list", "watch"}; !slices.Equal(claims.Verbs, want) {
		t.Errorf("resourceclaims verbs %v, want the union %v", claims.Verbs, want)
	}
	var subs []string
	for _, s := range claims.Subresources {
		subs = append(subs, s.Subresource)
	}
	if want := []string{"binding", "status"}; !slices.Equal(subs, want) {
		t.Errorf("resourceclaims subresources %v, want %v", subs, want)
	}
	// A resource both serve alike is the endpoints' own bytes.
	dc := findResource(l, "resource.k8s.io", "v1", "deviceclasses")
	if dc == nil || !reflect.DeepEqual(*dc, deviceClasses("v1")) {
		t.Errorf("deviceclasses %+v, want %+v", dc, deviceClasses("v1"))
	}
	if core := decodeList(t, m.core.body); findResource(core, "", "v1", "pods") == nil {
		t.Errorf("the merged /api lacks pods: %s", m.core.body)
	}
}

// TestMergeOrderIndependent: the answer depends on what the endpoints
// serve, not on which endpoint serves it, in what order they are read,
// nor on how many serve each release.
func TestMergeOrderIndependent(t *testing.T) {
	old, upgraded := newFakeAPIServer("v1.36.4", oldGroups), newFakeAPIServer("v1.37.2", newGroups)
	want := mergeOf(t, old, upgraded)
	for name, servers := range map[string][]http.Handler{
		"swapped":          {upgraded, old},
		"two new, one old": {upgraded, old, upgraded},
		"two old, one new": {old, old, upgraded},
	} {
		got := mergeOf(t, servers...)
		if string(got.groups.body) != string(want.groups.body) || got.groups.etag != want.groups.etag {
			t.Errorf("%s: the merged /apis differs:\n%s\nwant\n%s", name, got.groups.body, want.groups.body)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the legacy documents differ", name)
		}
	}
}

// TestMergePreferredVersion: a group's preferred version (its first) is
// the first one every release serves; a group only one release serves
// keeps its order.
func TestMergePreferredVersion(t *testing.T) {
	v := func(version string) apidiscoveryv2.APIVersionDiscovery {
		return apidiscoveryv2.APIVersionDiscovery{Version: version, Resources: []apidiscoveryv2.APIResourceDiscovery{
			{Resource: "widgets", Scope: apidiscoveryv2.ScopeCluster, ResponseKind: kindOf("example.com", version, "Widget"), Verbs: []string{"get"}}}}
	}
	old := newFakeAPIServer("v1.36.4", map[string][]apidiscoveryv2.APIVersionDiscovery{"example.com": {v("v1")}})
	upgraded := newFakeAPIServer("v1.37.2", map[string][]apidiscoveryv2.APIVersionDiscovery{
		"example.com": {v("v2"), v("v1")},
		"new.io":      {v("v1beta1"), v("v1alpha1")},
	})
	m := mergeOf(t, old, upgraded)
	order := map[string][]string{}
	for _, g := range decodeList(t, m.groups.body).Items {
		for _, ver := range g.Versions {
			order[g.Name] = append(order[g.Name], ver.Version)
		}
	}
	if got := order["example.com"]; !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("example.com versions %v, want v1 (served by both) first, then v2", got)
	}
	if got := order["new.io"]; !slices.Equal(got, []string{"v1beta1", "v1alpha1"}) {
		t.Errorf("new.io versions %v, want its own order", got)
	}
	var g metav1.APIGroup
	if err := json.Unmarshal(m.group["example.com"].body, &g); err != nil {
		t.Fatal(err)
	}
	if g.PreferredVersion.Version != "v1" || len(g.Versions) != 2 {
		t.Errorf("legacy /apis/example.com: %+v, want preferred v1 of 2 versions", g)
	}
}

// TestMergeStale: a version Stale on one endpoint and current on the
// other is current, from the current copy; Stale everywhere stays Stale
// and out of the legacy documents.
func TestMergeStale(t *testing.T) {
	current := apidiscoveryv2.APIVersionDiscovery{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent, Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "metrics", Scope: apidiscoveryv2.ScopeCluster, ResponseKind: kindOf("metrics.k8s.io", "v1", "Metric"), Verbs: []string{"get"}}}}
	stale := apidiscoveryv2.APIVersionDiscovery{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessStale, Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "oldmetrics", Scope: apidiscoveryv2.ScopeCluster, ResponseKind: kindOf("metrics.k8s.io", "v1", "Metric"), Verbs: []string{"get"}}}}
	a := newFakeAPIServer("a", map[string][]apidiscoveryv2.APIVersionDiscovery{"metrics.k8s.io": {current}, "gone.io": {stale}})
	b := newFakeAPIServer("b", map[string][]apidiscoveryv2.APIVersionDiscovery{"metrics.k8s.io": {stale}, "gone.io": {stale}})
	for _, order := range [][]http.Handler{{a, b}, {b, a}} {
		checkStale(t, mergeOf(t, order...))
	}
}

func checkStale(t *testing.T, m *merged) {
	t.Helper()
	l := decodeList(t, m.groups.body)
	for _, g := range l.Items {
		want := map[string]apidiscoveryv2.DiscoveryFreshness{"metrics.k8s.io": apidiscoveryv2.DiscoveryFreshnessCurrent, "gone.io": apidiscoveryv2.DiscoveryFreshnessStale}[g.Name]
		if got := g.Versions[0].Freshness; got != want {
			t.Errorf("%s freshness %q, want %q", g.Name, got, want)
		}
	}
	if findResource(l, "metrics.k8s.io", "v1", "metrics") == nil || findResource(l, "metrics.k8s.io", "v1", "oldmetrics") != nil {
		t.Errorf("want the current copy's resources, not the stale one's: %s", m.groups.body)
	}
	if _, ok := m.resources["/apis/gone.io/v1"]; ok {
		t.Error("a version Stale everywhere has a legacy APIResourceList")
	}
}

// TestMergeLegacyMatchesClientGo: the legacy documents are what
// client-go's own conversion of the merged aggregated discovery gives
// (discovery.SplitGroupsAndResources), group and version of each resource
// aside, which kube-apiserver leaves out where they are the list's own.
func TestMergeLegacyMatchesClientGo(t *testing.T) {
	m := mergeOf(t, newFakeAPIServer("v1.36.4", oldGroups), newFakeAPIServer("v1.37.2", newGroups))
	var agg apidiscoveryv2.APIGroupDiscoveryList
	for _, body := range [][]byte{m.core.body, m.groups.body} {
		agg.Items = append(agg.Items, decodeList(t, body).Items...)
	}
	wantGroups, wantResources, failed := discovery.SplitGroupsAndResources(agg)
	if len(failed) > 0 {
		t.Fatalf("client-go: %v", failed)
	}
	var gotList metav1.APIGroupList
	if err := json.Unmarshal(m.groupList.body, &gotList); err != nil {
		t.Fatal(err)
	}
	// client-go's list has the core group first; /apis does not.
	if want := wantGroups.Groups[1:]; !reflect.DeepEqual(gotList.Groups, want) {
		t.Errorf("APIGroupList\n%+v\nwant\n%+v", gotList.Groups, want)
	}
	for gv, want := range wantResources {
		path := "/apis/" + gv.String()
		if gv.Group == "" {
			path = "/api/" + gv.Version
		}
		d, ok := m.resources[path]
		if !ok {
			t.Errorf("no APIResourceList for %s", path)
			continue
		}
		var got metav1.APIResourceList
		if err := json.Unmarshal(d.body, &got); err != nil {
			t.Fatal(err)
		}
		for i := range want.APIResources {
			r := &want.APIResources[i]
			if (schema.GroupVersion{Group: r.Group, Version: r.Version}) == gv {
				r.Group, r.Version = "", ""
			}
		}
		if len(want.APIResources) == 0 {
			want.APIResources = []metav1.APIResource{}
		}
		if got.GroupVersion != gv.String() || !reflect.DeepEqual(got.APIResources, want.APIResources) {
			t.Errorf("%s:\n%+v\nwant\n%+v", path, got, want)
		}
	}
	if len(m.resources) != len(wantResources) {
		t.Errorf("%d APIResourceLists, client-go finds %d", len(m.resources), len(wantResources))
	}
}

// TestAnswer: through the Discoverer, while the endpoints' documents
// differ, discovery is answered from the merge in the forms client-go asks
// for, with a stable ETag and 304s; other forms and paths go through, and
// nothing is answered once the endpoints agree again.
func TestAnswer(t *testing.T) {
	old, upgraded := newFakeAPIServer("v1.36.4", oldGroups), newFakeAPIServer("v1.37.2", newGroups)
	sink := newTables()
	d, err := New(Config{}, handlers{"a:1": old, "b:1": upgraded}, sink, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d.Update([]resolver.Endpoint{{Address: "a:1"}, {Address: "b:1"}})
	d.Start()
	defer d.Stop()
	waitFor(t, sink.ch, func() bool {
		a, _ := sink.get()
		tb, _ := a.(*Table)
		return tb != nil && tb.Set("a:1") != nil && tb.Set("b:1") != nil
	})
	clientGo := "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
	ask := func(path, accept, etag string) *http.Response {
		r := httptest.NewRequest(http.MethodGet, path+"?timeout=32s", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if etag != "" {
			r.Header.Set("If-None-Match", etag)
		}
		return d.Answer(r)
	}
	read := func(resp *http.Response) string {
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	cases := []struct {
		path, accept string
		want         string // Content-Type, "" for no answer (the request goes through)
		contains     string
	}{
		{"/apis", clientGo, contentTypeAggregated, `"v1beta2"`},
		{"/api", clientGo, contentTypeAggregated, `"pods"`},
		{"/apis", "application/json", "application/json", `"kind":"APIGroupList"`},
		{"/apis", "", "application/json", `"kind":"APIGroupList"`},
		{"/apis/resource.k8s.io", clientGo, "application/json", `"preferredVersion":{"groupVersion":"resource.k8s.io/v1"`},
		{"/apis/resource.k8s.io/v1beta2", "application/json, */*", "application/json", `"name":"deviceclasses"`},
		{"/api/v1", "application/json", "application/json", `"groupVersion":"v1"`},
		{"/api", "application/json", "", ""},                     // legacy /api: v1 alone, passed through
		{"/apis", "application/vnd.kubernetes.protobuf", "", ""}, // protobuf
		{"/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer," + clientGo, "", ""},
		{"/apis", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", "", ""},
		{"/apis/nosuch.io", "application/json", "", ""},                        // the apiservers' 404
		{"/apis/resource.k8s.io/v1/deviceclasses", "application/json", "", ""}, // a resource
	}
	for _, c := range cases {
		resp := ask(c.path, c.accept, "")
		switch {
		case c.want == "" && resp != nil:
			t.Errorf("%s (Accept %q): answered, want it passed through", c.path, c.accept)
		case c.want == "":
		case resp == nil:
			t.Errorf("%s (Accept %q): passed through, want an answer", c.path, c.accept)
		default:
			body := read(resp)
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != c.want || !strings.Contains(body, c.contains) {
				t.Errorf("%s (Accept %q): %d %s %.300s; want %s containing %s", c.path, c.accept, resp.StatusCode, ct, body, c.want, c.contains)
			}
		}
	}
	// Stable: the same body and ETag every time; If-None-Match gets 304.
	first := ask("/apis", clientGo, "")
	body, etag := read(first), first.Header.Get("ETag")
	for range 5 {
		r := ask("/apis", clientGo, "")
		if b := read(r); b != body || r.Header.Get("ETag") != etag {
			t.Fatal("the answer changed from one request to the next")
		}
	}
	if r := ask("/apis", clientGo, etag); r.StatusCode != http.StatusNotModified || read(r) != "" {
		t.Errorf("If-None-Match %s: %d, want 304 without a body", etag, r.StatusCode)
	}
	if r := ask("/apis", clientGo, `"other"`); r.StatusCode != http.StatusOK {
		t.Errorf("If-None-Match of another ETag: %d, want 200", r.StatusCode)
	}
	if got := testutil.ToFloat64(d.merges.WithLabelValues(formAggregated)); got != 10 {
		t.Errorf("fanout_discovery_merged_total{form=aggregated} = %v, want 10", got)
	}

	// a is upgraded: the documents agree, requests go through again.
	for g, vs := range newGroups {
		for _, v := range vs {
			old.groups.AddGroupVersion(g, v)
		}
	}
	old.groups.RemoveGroup("old.example.com")
	d.Refresh("a:1")
	waitFor(t, sink.ch, func() bool { return ask("/apis", clientGo, "") == nil })
}

func TestNegotiate(t *testing.T) {
	for _, c := range []struct {
		accept string
		root   bool
		want   string
	}{
		{"", true, formLegacy},
		{"*/*", false, formLegacy},
		{"application/json;q=0.9", false, formLegacy},
		{"application/json;q=0,application/yaml", true, ""},
		{"application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io", true, formAggregated},
		{"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", false, formLegacy},
		{"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", false, ""},
		{"application/vnd.kubernetes.protobuf,application/json", true, ""},
		{"application/cbor", true, ""},
		{"text/html", true, ""},
	} {
		if got := negotiate(c.accept, c.root); got != c.want {
			t.Errorf("negotiate(%q, root %v) = %q, want %q", c.accept, c.root, got, c.want)
		}
	}
}

func TestMergeOrder(t *testing.T) {
	for _, c := range []struct {
		lists [][]string
		want  []string
	}{
		{[][]string{{"a", "b", "c"}, {"a", "c"}}, []string{"a", "b", "c"}},
		{[][]string{{"a", "c"}, {"a", "b", "c"}}, []string{"a", "b", "c"}},
		{[][]string{{"v1", "v1beta1"}, {"v1", "v1beta2", "v1beta1"}}, []string{"v1", "v1beta2", "v1beta1"}},
		{[][]string{{"x", "y"}, {"y", "x"}}, []string{"x", "y"}}, // a cycle: first seen first
		{[][]string{{"b"}, {"a"}}, []string{"b", "a"}},
	} {
		if got := mergeOrder(c.lists); !slices.Equal(got, c.want) {
			t.Errorf("mergeOrder(%v) = %v, want %v", c.lists, got, c.want)
		}
	}
}
