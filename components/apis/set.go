package apis

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fanout-dev/fanout/components/balancer"
)

// Set is what one apiserver serves: its group/versions, the resources in
// each and their subresources, and its version. It is immutable.
type Set struct {
	// Version is the apiserver's /version gitVersion ("v1.37.2"), "" if
	// unknown.
	Version string
	gvs     map[groupVersion]map[string]map[string]struct{} // resource → subresources
	// digest tells two Sets apart by what they serve, Version aside.
	digest [32]byte
	count  int // resources and subresources
	// core and groups are the aggregated /api and /apis documents, nil
	// when the apiserver answered the legacy ones.
	core, groups []byte
}

type groupVersion struct{ group, version string }

func (gv groupVersion) String() string {
	if gv.group == "" {
		return gv.version
	}
	return gv.group + "/" + gv.version
}

// Serves reports whether the apiserver serves api.
func (s *Set) Serves(api balancer.API) bool {
	subs, ok := s.gvs[groupVersion{api.Group, api.Version}][api.Resource]
	if !ok {
		return false
	}
	if api.Subresource == "" {
		return true
	}
	_, ok = subs[api.Subresource]
	return ok
}

// GroupVersions returns the group/versions served, sorted ("v1" for the
// core group).
func (s *Set) GroupVersions() []string {
	out := make([]string, 0, len(s.gvs))
	for gv := range s.gvs {
		out = append(out, gv.String())
	}
	slices.Sort(out)
	return out
}

// Resources is how many resources and subresources the Set holds.
func (s *Set) Resources() int { return s.count }

// builder collects a Set.
type builder struct {
	gvs map[groupVersion]map[string]map[string]struct{}
}

func newBuilder() *builder {
	return &builder{gvs: map[groupVersion]map[string]map[string]struct{}{}}
}

// add records resource (or "resource/subresource", the legacy form) of
// group/version; resource "" records the group/version alone.
func (b *builder) add(group, version, resource string, subresources ...string) {
	gv := groupVersion{group, version}
	rs := b.gvs[gv]
	if rs == nil {
		rs = map[string]map[string]struct{}{}
		b.gvs[gv] = rs
	}
	if resource == "" {
		return
	}
	resource, sub, _ := strings.Cut(resource, "/")
	subs := rs[resource]
	if subs == nil {
		subs = map[string]struct{}{}
		rs[resource] = subs
	}
	if sub != "" {
		subs[sub] = struct{}{}
	}
	for _, s := range subresources {
		subs[s] = struct{}{}
	}
}

func (b *builder) set(version string) *Set {
	s := &Set{Version: version, gvs: b.gvs}
	var lines []string
	for gv, rs := range b.gvs {
		lines = append(lines, gv.String()+" ")
		for r, subs := range rs {
			lines = append(lines, gv.String()+" "+r)
			s.count++
			for sub := range subs {
				lines = append(lines, gv.String()+" "+r+"/"+sub)
				s.count++
			}
		}
	}
	slices.Sort(lines)
	s.digest = sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return s
}

// The discovery documents, as far as routing reads them. They are decoded
// with these small structs rather than k8s.io/api/apidiscovery/v2 and
// apimachinery's metav1, which the sidecar does not link
// (docs/footprint.md); TestDecodeMatchesAPITypes encodes the real types
// and decodes them here.

// groupDiscoveryList is apidiscovery.k8s.io/v2 APIGroupDiscoveryList, the
// aggregated discovery of /api and /apis.
type groupDiscoveryList struct {
	Kind  string `json:"kind"`
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Versions []struct {
			Version   string `json:"version"`
			Resources []struct {
				Resource     string `json:"resource"`
				Subresources []struct {
					Subresource string `json:"subresource"`
				} `json:"subresources"`
			} `json:"resources"`
		} `json:"versions"`
	} `json:"items"`
}

// aggregatedKind is the kind of an aggregated discovery answer; an
// apiserver that does not serve it answers the legacy document instead.
const aggregatedKind = "APIGroupDiscoveryList"

// addAggregated adds an aggregated discovery document to b. ok is false
// when body is not one (an older apiserver's legacy answer).
func (b *builder) addAggregated(body []byte) (ok bool, err error) {
	var l groupDiscoveryList
	if err := json.Unmarshal(body, &l); err != nil {
		return false, fmt.Errorf("decoding discovery: %w", err)
	}
	if l.Kind != aggregatedKind {
		return false, nil
	}
	for _, g := range l.Items {
		for _, v := range g.Versions {
			b.add(g.Metadata.Name, v.Version, "")
			for _, r := range v.Resources {
				subs := make([]string, len(r.Subresources))
				for i, s := range r.Subresources {
					subs[i] = s.Subresource
				}
				b.add(g.Metadata.Name, v.Version, r.Resource, subs...)
			}
		}
	}
	return true, nil
}

// Legacy discovery: /api (APIVersions), /apis (APIGroupList), then one
// APIResourceList per group/version.
type (
	apiVersions struct {
		Versions []string `json:"versions"`
	}
	apiGroupList struct {
		Groups []struct {
			Name     string `json:"name"`
			Versions []struct {
				Version string `json:"version"`
			} `json:"versions"`
		} `json:"groups"`
	}
	apiResourceList struct {
		Resources []struct {
			Name string `json:"name"` // "pods" or "pods/status"
		} `json:"resources"`
	}
)
