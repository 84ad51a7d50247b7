// Package proxytest holds the fakes that the tests of components/proxy and
// components/listener share, so that neither carries a copy: a Picker that
// records every pick and Done, an Upstream that maps addresses to
// RoundTrippers, and a TLS backend standing in for kube-apiserver.
//
// It does not import components/proxy, so that the proxy's own tests can
// import it. Nothing here is fit for production use.
package proxytest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// Picker picks the first endpoint that is not avoided, like a balancer
// with one obvious choice, and records every pick and every Done. It
// implements proxy.Picker.
type Picker struct {
	mu    sync.Mutex
	eps   []*balancer.Endpoint
	picks []PickRecord
}

// PickRecord is one pick: what was asked, the endpoint given, and every
// Done reported for it.
type PickRecord struct {
	Info  balancer.PickInfo
	Addr  string
	Dones []balancer.DoneInfo
}

// NewPicker returns a Picker over addrs, in that order of preference.
func NewPicker(addrs ...string) *Picker {
	p := &Picker{}
	for _, a := range addrs {
		p.eps = append(p.eps, balancer.NewEndpoint(a))
	}
	return p
}

// Pick implements proxy.Picker. A pick that must move (Unloaded) and finds
// no other endpoint fails with balancer.ErrNoAlternative, as does one that
// asks for an endpoint known to serve its path (Served: the fake has no
// routing table) or for an address it does not have (Only).
func (p *Picker) Pick(info balancer.PickInfo) (balancer.Pick, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.eps) == 0 {
		return balancer.Pick{}, balancer.ErrNoEndpoints
	}
	ep := p.eps[0]
	moved := false
	for _, e := range p.eps {
		if e.Address() != info.Avoid {
			ep, moved = e, true
			break
		}
	}
	if info.Unloaded && !moved {
		return balancer.Pick{}, balancer.ErrNoAlternative
	}
	if info.Served {
		return balancer.Pick{}, balancer.ErrNoAlternative
	}
	if info.Only != "" {
		i := slices.IndexFunc(p.eps, func(e *balancer.Endpoint) bool { return e.Address() == info.Only })
		if i < 0 {
			return balancer.Pick{}, balancer.ErrNoAlternative
		}
		ep = p.eps[i]
	}
	i := len(p.picks)
	p.picks = append(p.picks, PickRecord{Info: info, Addr: ep.Address()})
	return balancer.NewPick(ep, func(di balancer.DoneInfo) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.picks[i].Dones = append(p.picks[i].Dones, di)
	}), nil
}

// Addrs returns the addresses later picks choose from, in order.
func (p *Picker) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.eps))
	for i, e := range p.eps {
		out[i] = e.Address()
	}
	return out
}

// Remove takes addr out of the endpoints later picks choose from.
func (p *Picker) Remove(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eps = slices.DeleteFunc(p.eps, func(e *balancer.Endpoint) bool { return e.Address() == addr })
}

// Records returns a copy of every pick so far, in order.
func (p *Picker) Records() []PickRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PickRecord, len(p.picks))
	for i, r := range p.picks {
		r.Dones = slices.Clone(r.Dones)
		out[i] = r
	}
	return out
}

// Forget drops the records of the picks so far, whose Dones must all have
// been reported: for benchmarks, to keep the record from growing.
func (p *Picker) Forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.picks = p.picks[:0]
}

// CheckDoneOnce must run after the server stopped: by then every response
// body was closed, so every pick must have reported exactly once.
func (p *Picker) CheckDoneOnce(t testing.TB) {
	t.Helper()
	for i, r := range p.Records() {
		if len(r.Dones) != 1 {
			t.Errorf("pick %d (%s): Done called %d times, want exactly 1", i, r.Addr, len(r.Dones))
		}
	}
}

// Upstream maps addresses to RoundTrippers and records every For call. It
// implements proxy.Upstream. An address it was not given answers with an
// UnprocessedError, as the transport does for an endpoint it cannot reach.
type Upstream struct {
	mu    sync.Mutex
	rts   map[string]http.RoundTripper
	calls []Call
}

// Call is one call of Upstream.For.
type Call struct {
	Addr string
	Mode transport.AuthMode
}

// NewUpstream returns an Upstream that knows no address yet.
func NewUpstream() *Upstream { return &Upstream{rts: map[string]http.RoundTripper{}} }

// Set makes rt the RoundTripper of addr.
func (u *Upstream) Set(addr string, rt http.RoundTripper) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rts[addr] = rt
}

// For implements proxy.Upstream.
func (u *Upstream) For(addr string, mode transport.AuthMode) http.RoundTripper {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, Call{addr, mode})
	if rt, ok := u.rts[addr]; ok {
		return rt
	}
	return testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, &transport.UnprocessedError{Endpoint: addr, Err: errors.New("test has no such endpoint")}
	})
}

// Calls returns a copy of every For call so far, in order.
func (u *Upstream) Calls() []Call {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.calls)
}

// Forget drops the record of the For calls so far: for benchmarks, to
// keep it from growing.
func (u *Upstream) Forget() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = u.calls[:0]
}

// NewBackend starts a TLS test server standing in for kube-apiserver and
// returns its address and a RoundTripper that trusts it. HTTP/2 unless h1
// is set, which tests use to see headers an HTTP/2 transport would filter
// by itself. It is closed when the test ends.
func NewBackend(t testing.TB, h http.Handler, h1 bool) (string, http.RoundTripper) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = !h1
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), srv.Client().Transport
}

// Backend is one HTTP/2 backend serving h, behind a Picker and an Upstream
// that know only it.
func Backend(t testing.TB, h http.Handler) (*Picker, *Upstream) {
	t.Helper()
	addr, rt := NewBackend(t, h, false)
	u := NewUpstream()
	u.Set(addr, rt)
	return NewPicker(addr), u
}

// OKBackend is a Backend that answers every request with 200 "ok".
func OKBackend(t testing.TB) (*Picker, *Upstream) {
	t.Helper()
	return Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
}
