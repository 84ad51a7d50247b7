package health

// ResolveNower is a resolver that can look up sooner than its interval,
// such as *resolver.DNS. ResolveNow must neither block nor look up more
// often than the resolver can afford; it coalesces calls itself.
type ResolveNower interface {
	ResolveNow()
}

// WithResolveOnFailure returns the sink of probe results for a prober
// whose endpoints come from r: sink itself, or, when r is a ResolveNower,
// sink decorated so that an endpoint failing its probe also asks r to
// look up again at once. The apiserver may have moved to another address,
// and waiting for the next interval would keep clients on the old one.
// SetReady is called after every probe, so a failing endpoint asks once
// per probe interval.
func WithResolveOnFailure(sink Sink, r any) Sink {
	if rn, ok := r.(ResolveNower); ok {
		return resolveOnFailure{Sink: sink, resolver: rn}
	}
	return sink
}

type resolveOnFailure struct {
	Sink
	resolver ResolveNower
}

func (s resolveOnFailure) SetReady(address string, ready bool) {
	s.Sink.SetReady(address, ready)
	if !ready {
		s.resolver.ResolveNow()
	}
}
