package apis

import (
	"slices"
	"strings"

	"github.com/fanout-dev/fanout/components/balancer"
)

// Table is the routing table the balancer reads (balancer.APIs): the Set
// of every endpoint whose discovery is known. It is immutable; a change
// publishes a new one.
type Table struct {
	sets   map[string]*Set
	differ bool
}

var _ balancer.APIs = (*Table)(nil)

// NewTable returns the table of sets, by endpoint address.
func NewTable(sets map[string]*Set) *Table {
	t := &Table{sets: sets}
	var first *Set
	for _, s := range sets {
		if first == nil {
			first = s
		} else if s.digest != first.digest {
			t.differ = true
		}
	}
	return t
}

// Differ reports whether the known endpoints serve different APIs.
func (t *Table) Differ() bool { return t.differ }

// Serves reports whether the endpoint at address serves api; true when
// its discovery is not known.
func (t *Table) Serves(address string, api balancer.API) bool {
	s, ok := t.sets[address]
	return !ok || s.Serves(api)
}

// Version returns the endpoint's version, "" if unknown.
func (t *Table) Version(address string) string {
	if s := t.sets[address]; s != nil {
		return s.Version
	}
	return ""
}

// Set returns the endpoint's Set, nil if unknown.
func (t *Table) Set(address string) *Set { return t.sets[address] }

// maxLogged bounds the group/versions a log line names.
const maxLogged = 10

// partial returns the group/versions some known endpoints serve and
// others do not, sorted, at most maxLogged of them, and how many there
// are in all. Resource-level differences within a group/version shared by
// all are not named, only counted as the group/version.
func (t *Table) partial() (gvs []string, n int) {
	count := map[string]int{}
	for _, s := range t.sets {
		for gv := range s.gvs {
			count[gv.String()]++
		}
	}
	for gv, c := range count {
		if c < len(t.sets) {
			gvs = append(gvs, gv)
		}
	}
	slices.Sort(gvs)
	n = len(gvs)
	if n == 0 {
		// Same group/versions, different resources in them.
		return nil, 0
	}
	return gvs[:min(n, maxLogged)], n
}

// versions returns "address=version" for each known endpoint, sorted.
func (t *Table) versions() string {
	out := make([]string, 0, len(t.sets))
	for a, s := range t.sets {
		v := s.Version
		if v == "" {
			v = "unknown"
		}
		out = append(out, a+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
