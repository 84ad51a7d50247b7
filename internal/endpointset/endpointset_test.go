package endpointset

import (
	"slices"
	"testing"
)

func TestRetain(t *testing.T) {
	var s Set
	var added, removed []string
	retain := func(addrs ...string) {
		added, removed = nil, nil
		s.Retain(addrs, func(a string) { added = append(added, a) }, func(a string) { removed = append(removed, a) })
		slices.Sort(added)
		slices.Sort(removed)
	}
	retain("a", "b")
	if !slices.Equal(added, []string{"a", "b"}) || removed != nil {
		t.Errorf("first snapshot: added %v, removed %v; want a and b added", added, removed)
	}
	retain("b", "c")
	if !slices.Equal(added, []string{"c"}) || !slices.Equal(removed, []string{"a"}) {
		t.Errorf("second snapshot: added %v, removed %v; want c added, a removed", added, removed)
	}
	var all []string
	s.Range(func(a string) { all = append(all, a) })
	slices.Sort(all)
	if !slices.Equal(all, []string{"b", "c"}) {
		t.Errorf("Range gave %v, want b and c", all)
	}
}
