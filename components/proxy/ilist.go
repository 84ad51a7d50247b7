package proxy

import "iter"

// links is an element's place in an ilist. The element holds it, so that
// keeping a watch's body in the Handler's sets costs no
// allocation of its own: these sets are on the per-watch memory path
// (cmd/fanout's TestFootprintPerWatch). The zero value is "in no list".
type links[T any] struct{ prev, next *T }

// ilist is an intrusive doubly linked list of *T, which holds its links
// (linksOf). An element is in at most one ilist of its type at a time.
// ilist has no lock: its owner guards it, along with whatever else the
// owner keeps with it. The zero value is an empty list.
type ilist[T any, P interface {
	*T
	linksOf() *links[T]
}] struct {
	head *T
	n    int
}

// push adds e, which must not be in a list, at the head.
func (l *ilist[T, P]) push(e P) {
	el := e.linksOf()
	el.prev, el.next = nil, l.head
	if l.head != nil {
		P(l.head).linksOf().prev = e
	}
	l.head = e
	l.n++
}

// remove takes e out of l and reports whether it was in it. Removing an
// element that is not (or no longer) in l does nothing, so that two
// goroutines may both end an element under the owner's lock.
func (l *ilist[T, P]) remove(e P) bool {
	el := e.linksOf()
	if el.prev == nil && l.head != e {
		return false
	}
	if el.prev != nil {
		P(el.prev).linksOf().next = el.next
	} else {
		l.head = el.next
	}
	if el.next != nil {
		P(el.next).linksOf().prev = el.prev
	}
	el.prev, el.next = nil, nil
	l.n--
	return true
}

// len is the number of elements in l.
func (l *ilist[T, P]) len() int { return l.n }

// all yields l's elements, most recently pushed first. The loop body must
// not push to or remove from l.
func (l *ilist[T, P]) all() iter.Seq[P] {
	return func(yield func(P) bool) {
		for e := l.head; e != nil; e = P(e).linksOf().next {
			if !yield(e) {
				return
			}
		}
	}
}
