package proxy

import (
	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// classified is what a request's one classification (reqinfo.Info, read
// by kube-apiserver's rules) means for the balancer and the transport.
// reqinfo knows nothing of either; classify is the one place that
// translates, once per request, when its state is built (newState).
type classified struct {
	// Kind is the balancer's kind: Long for what kube-apiserver treats as
	// long-running by its path (an upgrade's Kind is its path's too; the
	// listener's limits count every upgrade as long-running).
	Kind balancer.Kind
	// Class is the verb class of a resource request (balancer.ClassForVerb),
	// for the balancer to compare a LIST's latency with LISTs' rather than
	// with GETs'; ClassOther for everything else.
	Class balancer.Class
	// Mode is the credentials the request must be sent with: a request
	// that brings its own goes out without the sidecar's.
	Mode transport.AuthMode
}

// classify maps info to the balancer's and the transport's terms.
func classify(info reqinfo.Info) classified {
	var c classified
	if info.LongRunning {
		c.Kind = balancer.Long
	}
	if info.Resource {
		c.Class = balancer.ClassForVerb(info.Verb)
	}
	if info.OwnCredentials {
		c.Mode = transport.AuthPassthrough
	}
	return c
}
