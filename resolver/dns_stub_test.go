package resolver

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// stubDNS is a DNS server on loopback UDP that answers A and AAAA queries
// from a map the test changes. It exercises the DNS resolver with Go's own
// resolver (message parsing, NXDOMAIN, SERVFAIL) instead of a fake Lookup.
type stubDNS struct {
	conn net.PacketConn
	done chan struct{}

	mu sync.Mutex
	// records maps a rooted, lower-case name to its addresses. A name
	// that is absent is NXDOMAIN; one with no addresses is an empty answer.
	records map[string][]net.IP
	// rcode, unless RCodeSuccess, answers every query.
	rcode dnsmessage.RCode
}

// newStubDNS starts a stub server; it is closed when the test ends.
func newStubDNS(t *testing.T) *stubDNS {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("stub DNS server: %v", err)
	}
	s := &stubDNS{conn: conn, done: make(chan struct{}), records: map[string][]net.IP{}}
	go s.serve(t)
	t.Cleanup(func() {
		conn.Close()
		<-s.done
	})
	return s
}

// set makes name resolve to ips (none: an empty answer).
func (s *stubDNS) set(name string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parsed := make([]net.IP, 0, len(ips))
	for _, ip := range ips {
		parsed = append(parsed, net.ParseIP(ip))
	}
	s.records[rooted(name)] = parsed
}

// remove makes name NXDOMAIN.
func (s *stubDNS) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, rooted(name))
}

// fail makes every answer rcode; RCodeSuccess answers from records again.
func (s *stubDNS) fail(rcode dnsmessage.RCode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rcode = rcode
}

func rooted(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

func (s *stubDNS) serve(t *testing.T) {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		resp, err := s.answer(buf[:n])
		if err != nil {
			t.Logf("stub DNS server: dropping a query: %v", err)
			continue
		}
		if _, err := s.conn.WriteTo(resp, from); err != nil {
			t.Logf("stub DNS server: %v", err)
		}
	}
}

func (s *stubDNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	rcode := s.rcode
	ips, found := s.records[rooted(q.Name.String())]
	s.mu.Unlock()
	if rcode == dnsmessage.RCodeSuccess && !found {
		rcode = dnsmessage.RCodeNameError
	}
	// Authoritative with recursion available, or Go's resolver takes an
	// empty answer for a lame referral.
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode,
	})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if rcode != dnsmessage.RCodeSuccess {
		return b.Finish()
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	for _, ip := range ips {
		switch ip4 := ip.To4(); {
		case q.Type == dnsmessage.TypeA && ip4 != nil:
			var r dnsmessage.AResource
			copy(r.A[:], ip4)
			err = b.AResource(rh, r)
		case q.Type == dnsmessage.TypeAAAA && ip4 == nil:
			var r dnsmessage.AAAAResource
			copy(r.AAAA[:], ip.To16())
			err = b.AAAAResource(rh, r)
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// lookup is Go's own resolver, sending every query to the stub.
func (s *stubDNS) lookup() func(context.Context, string) ([]net.IPAddr, error) {
	addr := s.conn.LocalAddr().String()
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
	return r.LookupIPAddr
}

func TestDNSWithStubServer(t *testing.T) {
	const name = "apiserver.fanout.test"
	stub := newStubDNS(t)
	stub.set(name, "10.0.0.2", "fd00::1", "10.0.0.1")

	clk := testkit.NewClock(time.Unix(1000, 0))
	lookupErrs := make(chan error, 16)
	m := NewMetrics()
	stubLookup := stub.lookup()
	d := &DNS{
		Host: name, Port: "6443", Interval: time.Second, Clock: clk, Metrics: m,
		Fallback: []Endpoint{{Address: "kube.example:6443"}},
		Lookup: func(ctx context.Context, host string) ([]net.IPAddr, error) {
			addrs, err := stubLookup(ctx, host)
			lookupErrs <- err
			return addrs, err
		},
	}
	updates, stop := runResolver(t, d)
	defer stop()

	// tick runs one lookup and checks its error and what it published
	// (nil: nothing).
	lookups := 0
	tick := func(wantErr func(error) bool, want []string) {
		t.Helper()
		if lookups > 0 {
			clk.Advance(time.Second)
		}
		lookups++
		select {
		case err := <-lookupErrs:
			if !wantErr(err) {
				t.Fatalf("lookup %d: error %v", lookups, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("lookup %d did not happen within 10s", lookups)
		}
		got := nextUpdate(t, updates, want != nil)
		if !reflect.DeepEqual(addresses(got), orNil(want)) {
			t.Fatalf("lookup %d: published %v, want %v", lookups, addresses(got), want)
		}
	}
	noError := func(err error) bool { return err == nil }
	notFound := func(err error) bool {
		var dnsErr *net.DNSError
		return errors.As(err, &dnsErr) && dnsErr.IsNotFound
	}
	servFail := func(err error) bool {
		var dnsErr *net.DNSError
		return errors.As(err, &dnsErr) && !dnsErr.IsNotFound
	}

	first := []string{"10.0.0.1:6443", "10.0.0.2:6443", "[fd00::1]:6443"}
	tick(noError, first)

	// A changed record is picked up on the next tick.
	stub.set(name, "10.0.0.3", "fd00::1", "10.0.0.1")
	second := []string{"10.0.0.1:6443", "10.0.0.3:6443", "[fd00::1]:6443"}
	tick(noError, second)

	// SERVFAIL keeps the last set.
	stub.fail(dnsmessage.RCodeServerFailure)
	tick(servFail, nil)
	stub.fail(dnsmessage.RCodeSuccess)
	tick(noError, nil) // unchanged

	// NXDOMAIN keeps the last set.
	stub.remove(name)
	tick(notFound, nil)

	// So does an empty answer.
	stub.set(name)
	tick(notFound, nil)

	stub.set(name, "10.0.0.4")
	tick(noError, []string{"10.0.0.4:6443"})

	if got := testutil.ToFloat64(m.errors.WithLabelValues("dns")); got != 3 {
		t.Errorf("fanout_resolver_errors_total = %v, want 3", got)
	}
}
