package proxy

import (
	"slices"
	"testing"
)

type ilistElem struct {
	name string
	links[ilistElem]
}

func (e *ilistElem) linksOf() *links[ilistElem] { return &e.links }

// ilistNames is l's elements by name, head first. It also checks the
// links backwards, since all follows only next: each element's prev must
// be the one before it, and the head's nil.
func ilistNames(t *testing.T, l *ilist[ilistElem, *ilistElem]) []string {
	t.Helper()
	var names []string
	var before *ilistElem
	for e := range l.all() {
		if e.prev != before {
			t.Errorf("%s.prev is %v, want the element before it, %v", e.name, e.prev, before)
		}
		names = append(names, e.name)
		before = e
	}
	if len(names) != l.len() {
		t.Errorf("len() = %d, but all yields %d elements", l.len(), len(names))
	}
	return names
}

func TestIlist(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove []string // in this order, from the list d c b a
		want   []string
		in     []bool // what each remove returns
	}{
		{name: "head", remove: []string{"d"}, want: []string{"c", "b", "a"}, in: []bool{true}},
		{name: "middle", remove: []string{"c"}, want: []string{"d", "b", "a"}, in: []bool{true}},
		{name: "tail", remove: []string{"a"}, want: []string{"d", "c", "b"}, in: []bool{true}},
		{name: "twice", remove: []string{"b", "b"}, want: []string{"d", "c", "a"}, in: []bool{true, false}},
		{name: "head twice", remove: []string{"d", "d"}, want: []string{"c", "b", "a"}, in: []bool{true, false}},
		{name: "all", remove: []string{"b", "d", "a", "c"}, want: nil, in: []bool{true, true, true, true}},
		{name: "all then again", remove: []string{"a", "b", "c", "d", "c"}, want: nil, in: []bool{true, true, true, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l ilist[ilistElem, *ilistElem]
			elems := map[string]*ilistElem{}
			for _, name := range []string{"a", "b", "c", "d"} {
				e := &ilistElem{name: name}
				elems[name] = e
				l.push(e)
			}
			if got, want := ilistNames(t, &l), []string{"d", "c", "b", "a"}; !slices.Equal(got, want) {
				t.Fatalf("after pushing a, b, c, d: %v, want %v", got, want)
			}
			for i, name := range tc.remove {
				if got := l.remove(elems[name]); got != tc.in[i] {
					t.Errorf("remove #%d (%s) = %v, want %v", i+1, name, got, tc.in[i])
				}
			}
			if got := ilistNames(t, &l); !slices.Equal(got, tc.want) {
				t.Errorf("after removing %v: %v, want %v", tc.remove, got, tc.want)
			}
			for _, name := range tc.remove {
				if e := elems[name]; e.prev != nil || e.next != nil {
					t.Errorf("removed %s still links to prev %v, next %v", name, e.prev, e.next)
				}
			}
			// The removed elements may join a list again.
			for _, name := range tc.remove {
				if e := elems[name]; e.prev == nil && l.head != e {
					l.push(e)
				}
			}
			if got := len(ilistNames(t, &l)); got != 4 {
				t.Errorf("after pushing the removed ones back: %d elements, want 4", got)
			}
		})
	}
}

func TestIlistAllStopsEarly(t *testing.T) {
	var l ilist[ilistElem, *ilistElem]
	for _, name := range []string{"a", "b", "c"} {
		l.push(&ilistElem{name: name})
	}
	var seen []string
	for e := range l.all() {
		seen = append(seen, e.name)
		if e.name == "b" {
			break
		}
	}
	if want := []string{"c", "b"}; !slices.Equal(seen, want) {
		t.Errorf("all with a break after b yielded %v, want %v", seen, want)
	}
}
