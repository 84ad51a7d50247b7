package apis

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Merged discovery: while the endpoints' aggregated discovery documents
// differ (an upgrade), fanout answers discovery itself from their union,
// as kube-apiserver's peer-aggregated discovery (KEP-4020,
// k8s.io/apiserver .../discovery/aggregated/peer_aggregated_handler.go)
// merges its peers': every group, version, resource and subresource any
// endpoint serves, so that whatever a client learns is routed to an
// endpoint that serves it (balancer/apis.go), and the same answer
// whichever endpoint the request would have reached.
//
// Where upstream's merge applies it is followed: relative orders are kept
// (mergeOrder), a resource both serve differently gets the union of its
// verbs and subresources, sorted. Three choices are fanout's own:
//   - The documents are merged in the order of their content's digest,
//     identical documents once: the answer depends on what is served, not
//     on which endpoint serves it nor on how many do.
//   - A group's preferred version (the first of its versions) is the first
//     one, in the merged order, that every document serving the group
//     serves: the old release's preferred version during an upgrade, so
//     that clients that follow it (the garbage collector, the namespace
//     controller, kubectl) keep using every apiserver.
//   - A version is Stale only if it is Stale in every document; otherwise
//     the Stale copies are left out.

// merged is the union of the endpoints' aggregated discovery, rendered
// once in every form fanout answers. It is immutable.
type merged struct {
	core, groups doc            // aggregated /api, /apis
	groupList    doc            // legacy /apis (APIGroupList)
	group        map[string]doc // legacy /apis/<group> (APIGroup)
	resources    map[string]doc // legacy /api/<v>, /apis/<group>/<v> (APIResourceList), by path
}

// doc is one rendered answer and its ETag (quoted).
type doc struct {
	body []byte
	etag string
}

func newDoc(body []byte) doc {
	sum := sha256.Sum256(body)
	return doc{body: body, etag: `"` + hex.EncodeToString(sum[:]) + `"`}
}

// The aggregated discovery document (apidiscovery.k8s.io/v2
// APIGroupDiscoveryList) as the merge reads it: what it does not look at
// stays raw, so that the answer carries every field an endpoint sent.
type (
	aggList struct {
		Items []aggGroup `json:"items"`
	}
	aggGroup struct {
		Metadata json.RawMessage `json:"metadata"`
		Versions []aggVersion    `json:"versions"`
		name     string
	}
	aggVersion struct {
		Version   string            `json:"version"`
		Resources []json.RawMessage `json:"resources"`
		Freshness string            `json:"freshness,omitempty"`
	}
	// aggResource is the part of an APIResourceDiscovery that the merge
	// and the legacy documents read.
	aggResource struct {
		Resource         string      `json:"resource"`
		ResponseKind     *kind       `json:"responseKind,omitempty"`
		Scope            string      `json:"scope"`
		SingularResource string      `json:"singularResource"`
		Verbs            []string    `json:"verbs"`
		ShortNames       []string    `json:"shortNames,omitempty"`
		Categories       []string    `json:"categories,omitempty"`
		Subresources     []aggSubres `json:"subresources,omitempty"`
	}
	aggSubres struct {
		Subresource  string   `json:"subresource"`
		ResponseKind *kind    `json:"responseKind,omitempty"`
		Verbs        []string `json:"verbs"`
	}
	kind struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	}
)

const freshnessStale = "Stale"

// decodeAggregated decodes an aggregated discovery document.
func decodeAggregated(body []byte) (aggList, error) {
	var l aggList
	if err := json.Unmarshal(body, &l); err != nil {
		return l, fmt.Errorf("decoding aggregated discovery: %w", err)
	}
	for i := range l.Items {
		var m struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(l.Items[i].Metadata, &m); err != nil {
			return l, fmt.Errorf("decoding aggregated discovery: group metadata: %w", err)
		}
		l.Items[i].name = m.Name
	}
	return l, nil
}

// distinctDocs returns the distinct documents of bodies in the order of
// their digests.
func distinctDocs(bodies [][]byte) [][]byte {
	type keyed struct {
		sum  [32]byte
		body []byte
	}
	var ks []keyed
	for _, b := range bodies {
		sum := sha256.Sum256(b)
		if !slices.ContainsFunc(ks, func(k keyed) bool { return k.sum == sum }) {
			ks = append(ks, keyed{sum, b})
		}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return bytes.Compare(a.sum[:], b.sum[:]) })
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = k.body
	}
	return out
}

// newMerged merges the endpoints' aggregated /api and /apis documents
// (one of each per endpoint) and renders every answer.
func newMerged(core, groups [][]byte) (*merged, error) {
	m := &merged{group: map[string]doc{}, resources: map[string]doc{}}
	var err error
	var coreList, groupsList aggList
	if coreList, err = mergeDocs(distinctDocs(core)); err != nil {
		return nil, fmt.Errorf("/api: %w", err)
	}
	if groupsList, err = mergeDocs(distinctDocs(groups)); err != nil {
		return nil, fmt.Errorf("/apis: %w", err)
	}
	if m.core, err = renderAggregated(coreList); err != nil {
		return nil, err
	}
	if m.groups, err = renderAggregated(groupsList); err != nil {
		return nil, err
	}
	if err := m.renderLegacy(coreList, groupsList); err != nil {
		return nil, err
	}
	return m, nil
}

// mergeDocs merges aggregated documents, in the order given.
func mergeDocs(bodies [][]byte) (aggList, error) {
	lists := make([]aggList, len(bodies))
	for i, b := range bodies {
		l, err := decodeAggregated(b)
		if err != nil {
			return aggList{}, err
		}
		lists[i] = l
	}
	var order [][]string
	copies := map[string][]aggGroup{}
	for _, l := range lists {
		var names []string
		for _, g := range l.Items {
			names = append(names, g.name)
			copies[g.name] = append(copies[g.name], g)
		}
		order = append(order, names)
	}
	var out aggList
	for _, name := range mergeOrder(order) {
		g, err := mergeGroup(copies[name])
		if err != nil {
			return aggList{}, fmt.Errorf("group %q: %w", name, err)
		}
		out.Items = append(out.Items, g)
	}
	return out, nil
}

// mergeGroup merges the copies of one group, and puts its preferred
// version first.
func mergeGroup(copies []aggGroup) (aggGroup, error) {
	var order [][]string
	vcopies := map[string][]aggVersion{}
	for _, g := range copies {
		var names []string
		for _, v := range g.Versions {
			names = append(names, v.Version)
			vcopies[v.Version] = append(vcopies[v.Version], v)
		}
		order = append(order, names)
	}
	versions := mergeOrder(order)
	// The preferred version: the first that every copy of the group
	// serves (and does not mark Stale), else the first.
	preferred := 0
	for i, v := range versions {
		if len(vcopies[v]) == len(copies) && !slices.ContainsFunc(vcopies[v], func(c aggVersion) bool { return c.Freshness == freshnessStale }) {
			preferred = i
			break
		}
	}
	if preferred > 0 {
		p := versions[preferred]
		versions = append([]string{p}, slices.Delete(versions, preferred, preferred+1)...)
	}
	out := aggGroup{Metadata: copies[0].Metadata, name: copies[0].name}
	for _, v := range versions {
		mv, err := mergeVersion(vcopies[v])
		if err != nil {
			return aggGroup{}, fmt.Errorf("version %q: %w", v, err)
		}
		out.Versions = append(out.Versions, mv)
	}
	return out, nil
}

// mergeVersion merges the copies of one group/version: the union of their
// resources, a resource served differently getting the union of its verbs
// and subresources. Stale copies count only if every copy is Stale.
func mergeVersion(copies []aggVersion) (aggVersion, error) {
	fresh := slices.DeleteFunc(slices.Clone(copies), func(c aggVersion) bool { return c.Freshness == freshnessStale })
	if len(fresh) == 0 {
		fresh = copies
	}
	var order [][]string
	raws := map[string][]json.RawMessage{}
	for _, c := range fresh {
		var names []string
		for _, raw := range c.Resources {
			var r struct {
				Resource string `json:"resource"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				return aggVersion{}, err
			}
			names = append(names, r.Resource)
			if !slices.ContainsFunc(raws[r.Resource], func(x json.RawMessage) bool { return bytes.Equal(x, raw) }) {
				raws[r.Resource] = append(raws[r.Resource], raw)
			}
		}
		order = append(order, names)
	}
	out := aggVersion{Version: fresh[0].Version, Freshness: fresh[0].Freshness}
	for _, name := range mergeOrder(order) {
		raw, err := mergeResource(raws[name])
		if err != nil {
			return aggVersion{}, fmt.Errorf("resource %q: %w", name, err)
		}
		out.Resources = append(out.Resources, raw)
	}
	if out.Resources == nil {
		out.Resources = []json.RawMessage{}
	}
	return out, nil
}

// mergeResource merges the distinct copies of one resource: the first,
// with the union of every copy's verbs and subresources, sorted, as
// upstream's mergeResourceCapabilities does.
func mergeResource(copies []json.RawMessage) (json.RawMessage, error) {
	if len(copies) == 1 {
		return copies[0], nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(copies[0], &fields); err != nil {
		return nil, err
	}
	verbs := map[string]bool{}
	subs := map[string]json.RawMessage{}
	for _, c := range copies {
		var r struct {
			Verbs        []string          `json:"verbs"`
			Subresources []json.RawMessage `json:"subresources"`
		}
		if err := json.Unmarshal(c, &r); err != nil {
			return nil, err
		}
		for _, v := range r.Verbs {
			verbs[v] = true
		}
		for _, s := range r.Subresources {
			var name struct {
				Subresource string `json:"subresource"`
			}
			if err := json.Unmarshal(s, &name); err != nil {
				return nil, err
			}
			if _, ok := subs[name.Subresource]; !ok {
				subs[name.Subresource] = s
			}
		}
	}
	vs := sortedKeys(verbs)
	b, err := json.Marshal(vs)
	if err != nil {
		return nil, err
	}
	fields["verbs"] = b
	delete(fields, "subresources")
	if len(subs) > 0 {
		list := make([]json.RawMessage, 0, len(subs))
		for _, name := range sortedKeys(subs) {
			list = append(list, subs[name])
		}
		if fields["subresources"], err = json.Marshal(list); err != nil {
			return nil, err
		}
	}
	return json.Marshal(fields)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// mergeOrder merges lists of names into one that keeps, as far as the
// lists agree, the relative order of each (a topological sort, as
// apimachinery's util/sort MergePreservingRelativeOrder). Where they
// disagree, or leave the order open, a name seen earlier (in the first
// list first) comes first: the result depends on the lists and their
// order only.
func mergeOrder(lists [][]string) []string {
	index := map[string]int{} // first seen
	var names []string
	after := map[string][]string{}
	before := map[string]int{} // how many names must come first
	for _, l := range lists {
		for i, n := range l {
			if _, ok := index[n]; !ok {
				index[n] = len(names)
				names = append(names, n)
			}
			if i > 0 && !slices.Contains(after[l[i-1]], n) {
				after[l[i-1]] = append(after[l[i-1]], n)
				before[n]++
			}
		}
	}
	out := make([]string, 0, len(names))
	done := map[string]bool{}
	for len(out) < len(names) {
		// The earliest name that nothing left must precede; on a cycle,
		// the earliest name left.
		next, fallback := "", ""
		for _, n := range names {
			if done[n] {
				continue
			}
			if fallback == "" {
				fallback = n
			}
			if before[n] == 0 {
				next = n
				break
			}
		}
		if next == "" {
			next = fallback
		}
		done[next] = true
		out = append(out, next)
		for _, m := range after[next] {
			before[m]--
		}
	}
	return out
}

// renderAggregated encodes l as kube-apiserver does.
func renderAggregated(l aggList) (doc, error) {
	items := l.Items
	if items == nil {
		items = []aggGroup{}
	}
	body, err := json.Marshal(struct {
		Kind       string     `json:"kind"`
		APIVersion string     `json:"apiVersion"`
		Metadata   struct{}   `json:"metadata"`
		Items      []aggGroup `json:"items"`
	}{aggregatedKind, "apidiscovery.k8s.io/v2", struct{}{}, items})
	if err != nil {
		return doc{}, err
	}
	return newDoc(body), nil
}

// The legacy documents (meta/v1), as far as fanout writes them.
type (
	groupVersionForDiscovery struct {
		GroupVersion string `json:"groupVersion"`
		Version      string `json:"version"`
	}
	legacyGroup struct {
		Kind             string                     `json:"kind,omitempty"`
		APIVersion       string                     `json:"apiVersion,omitempty"`
		Name             string                     `json:"name"`
		Versions         []groupVersionForDiscovery `json:"versions"`
		PreferredVersion groupVersionForDiscovery   `json:"preferredVersion"`
	}
	legacyResource struct {
		Name         string   `json:"name"`
		SingularName string   `json:"singularName"`
		Namespaced   bool     `json:"namespaced"`
		Group        string   `json:"group,omitempty"`
		Version      string   `json:"version,omitempty"`
		Kind         string   `json:"kind"`
		Verbs        []string `json:"verbs"`
		ShortNames   []string `json:"shortNames,omitempty"`
		Categories   []string `json:"categories,omitempty"`
	}
)

// renderLegacy writes the legacy documents from the merged aggregated
// ones, as client-go's discovery converts them (SplitGroupsAndResources):
// Stale versions are left out, a group's first version is its preferred
// one, and storageVersionHash, which aggregated discovery does not carry,
// is missing.
func (m *merged) renderLegacy(core, groups aggList) error {
	var list []legacyGroup
	for _, l := range []aggList{core, groups} {
		for _, g := range l.Items {
			lg := legacyGroup{Kind: "APIGroup", APIVersion: "v1", Name: g.name, Versions: []groupVersionForDiscovery{}}
			for _, v := range g.Versions {
				if v.Freshness == freshnessStale {
					continue
				}
				gv := v.Version
				path := "/api/" + v.Version
				if g.name != "" {
					gv = g.name + "/" + v.Version
					path = "/apis/" + gv
				}
				lg.Versions = append(lg.Versions, groupVersionForDiscovery{gv, v.Version})
				d, err := renderResourceList(gv, v)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				m.resources[path] = d
			}
			if g.name == "" || len(lg.Versions) == 0 {
				continue // the core group is /api's, which is not merged
			}
			lg.PreferredVersion = lg.Versions[0]
			body, err := json.Marshal(lg)
			if err != nil {
				return err
			}
			m.group[g.name] = newDoc(body)
			lg.Kind, lg.APIVersion = "", ""
			list = append(list, lg)
		}
	}
	if list == nil {
		list = []legacyGroup{}
	}
	body, err := json.Marshal(struct {
		Kind       string        `json:"kind"`
		APIVersion string        `json:"apiVersion"`
		Groups     []legacyGroup `json:"groups"`
	}{"APIGroupList", "v1", list})
	if err != nil {
		return err
	}
	m.groupList = newDoc(body)
	return nil
}

// renderResourceList writes a group/version's APIResourceList.
func renderResourceList(gv string, v aggVersion) (doc, error) {
	out := []legacyResource{}
	for _, raw := range v.Resources {
		var r aggResource
		if err := json.Unmarshal(raw, &r); err != nil {
			return doc{}, err
		}
		if r.ResponseKind == nil || *r.ResponseKind == (kind{}) {
			continue // as client-go: a resource without a kind is left out
		}
		lr := legacyResource{
			Name: r.Resource, SingularName: r.SingularResource, Namespaced: r.Scope == "Namespaced",
			Verbs: orEmpty(r.Verbs), ShortNames: r.ShortNames, Categories: r.Categories,
		}
		lr.setKind(gv, *r.ResponseKind)
		out = append(out, lr)
		for _, s := range r.Subresources {
			if s.ResponseKind == nil || *s.ResponseKind == (kind{}) {
				continue
			}
			sr := legacyResource{
				Name: r.Resource + "/" + s.Subresource, SingularName: r.SingularResource, Namespaced: lr.Namespaced,
				Verbs: orEmpty(s.Verbs),
			}
			sr.setKind(gv, *s.ResponseKind)
			out = append(out, sr)
		}
	}
	body, err := json.Marshal(struct {
		Kind         string           `json:"kind"`
		APIVersion   string           `json:"apiVersion"`
		GroupVersion string           `json:"groupVersion"`
		Resources    []legacyResource `json:"resources"`
	}{"APIResourceList", "v1", gv, out})
	if err != nil {
		return doc{}, err
	}
	return newDoc(body), nil
}

// setKind sets the resource's kind, and its group and version where they
// are not the list's own, as kube-apiserver writes them (a scale
// subresource's autoscaling/v1).
func (r *legacyResource) setKind(gv string, k kind) {
	r.Kind = k.Kind
	own := k.Version
	if k.Group != "" {
		own = k.Group + "/" + k.Version
	}
	if own != gv {
		r.Group, r.Version = k.Group, k.Version
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// splitDiscoveryPath splits a discovery path: "/apis/g" → ("g", ""), "/apis/g/v" →
// ("g", "v"), "/api/v" → ("", "v").
func splitDiscoveryPath(path string) (group, version string, ok bool) {
	if v, found := strings.CutPrefix(path, "/api/"); found {
		return "", v, v != "" && !strings.Contains(v, "/")
	}
	rest, found := strings.CutPrefix(path, "/apis/")
	if !found || rest == "" {
		return "", "", false
	}
	group, version, _ = strings.Cut(rest, "/")
	return group, version, group != "" && !strings.Contains(version, "/")
}
