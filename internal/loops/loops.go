// Package loops runs one goroutine per endpoint address, started and
// stopped as the set of addresses changes: the health prober's probes and
// the discoverer's reads.
package loops

import "context"

// Set holds the running loops by address. It is not safe for concurrent
// use: its owner serialises Sync and Refresh under its own lock (a loop
// must never take that lock, since Sync waits for stopped loops under it).
type Set struct {
	m map[string]*loop
}

type loop struct {
	cancel  context.CancelFunc
	done    chan struct{}
	refresh chan struct{}
}

// Run is one address's loop. It returns once ctx ends; refresh receives
// a value for each Refresh of its address that found none pending.
type Run func(ctx context.Context, addr string, refresh <-chan struct{})

// Sync stops the loops of addresses not in keep and waits for them to
// return, then starts run for each address of keep without a loop,
// calling starting (if not nil) for it first. It returns the addresses
// stopped, for the owner's bookkeeping (metrics).
func (s *Set) Sync(keep map[string]bool, run Run, starting func(addr string)) (stopped []string) {
	if s.m == nil {
		s.m = map[string]*loop{}
	}
	for a, l := range s.m {
		if !keep[a] {
			l.cancel()
			stopped = append(stopped, a)
		}
	}
	for _, a := range stopped {
		<-s.m[a].done
		delete(s.m, a)
	}
	for a := range keep {
		if _, ok := s.m[a]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		l := &loop{cancel: cancel, done: make(chan struct{}), refresh: make(chan struct{}, 1)}
		s.m[a] = l
		if starting != nil {
			starting(a)
		}
		go func() {
			defer close(l.done)
			run(ctx, a, l.refresh)
		}()
	}
	return stopped
}

// Refresh wakes addr's loop, if it runs and has no wake-up pending.
func (s *Set) Refresh(addr string) {
	if l := s.m[addr]; l != nil {
		select {
		case l.refresh <- struct{}{}:
		default:
		}
	}
}

// Keep returns the addresses to keep: want while running, else none.
func Keep(running bool, want []string) map[string]bool {
	keep := map[string]bool{}
	if running {
		for _, a := range want {
			keep[a] = true
		}
	}
	return keep
}

// Len is how many loops run.
func (s *Set) Len() int { return len(s.m) }
