package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// tracking registers collectors on the caller's registerer and remembers
// them, so that Stop can unregister them: a program that builds a new
// engine on the same registry (the library after Close) must be able to.
type tracking struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

// orNil is t as a Registerer, or nil when there is no registry, for
// constructors that register only what they are given.
func (t *tracking) orNil() prometheus.Registerer {
	if t.reg == nil {
		return nil
	}
	return t
}

func (t *tracking) Register(c prometheus.Collector) error {
	if err := t.reg.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.cs = append(t.cs, c)
	t.mu.Unlock()
	return nil
}

func (t *tracking) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *tracking) Unregister(c prometheus.Collector) bool { return t.reg.Unregister(c) }

func (t *tracking) unregisterAll() {
	if t.reg == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cs {
		t.reg.Unregister(c)
	}
	t.cs = nil
}
