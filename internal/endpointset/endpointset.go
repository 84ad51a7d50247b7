// Package endpointset follows the endpoint set for those who keep
// something per endpoint, such as the Prometheus series of an endpoint
// label: each snapshot says which endpoints are new and which left.
package endpointset

import "sync"

// Set is the endpoint set of the last Retain. The zero value is empty and
// ready to use; it is safe for concurrent use.
type Set struct {
	mu    sync.Mutex
	known map[string]struct{}
}

// Retain makes addresses the set, calling added for each address new to
// it and removed for each that left it, under the Set's lock.
func (s *Set) Retain(addresses []string, added, removed func(address string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]struct{}, len(addresses))
	for _, a := range addresses {
		next[a] = struct{}{}
		if _, ok := s.known[a]; !ok {
			added(a)
		}
	}
	for a := range s.known {
		if _, ok := next[a]; !ok {
			removed(a)
		}
	}
	s.known = next
}

// Range calls f for each address of the set, under the Set's lock.
func (s *Set) Range(f func(address string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.known {
		f(a)
	}
}
