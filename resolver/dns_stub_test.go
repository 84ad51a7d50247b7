package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/dns/dnsmessage"
)

// stubDNS is a DNS server that answers A and AAAA queries from a map the
// test changes. It exercises the DNS resolver with Go's own resolver
// (message parsing, NXDOMAIN, SERVFAIL) instead of a fake Lookup. It
// serves in-memory connections (net.Pipe), on which Go's resolver speaks
// DNS over TCP, so that its tests run in a synctest bubble, where a UDP
// socket would keep the bubble's time from moving.
type stubDNS struct {
	t *testing.T

	mu sync.Mutex
	// records maps a rooted, lower-case name to its addresses. A name
	// that is absent is NXDOMAIN; one with no addresses is an empty answer.
	records map[string][]net.IP
	// rcode, unless RCodeSuccess, answers every query.
	rcode dnsmessage.RCode
}

func newStubDNS(t *testing.T) *stubDNS {
	return &stubDNS{t: t, records: map[string][]net.IP{}}
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

// serve answers the queries of one connection, each a two-byte length
// and a message, until the resolver closes it.
func (s *stubDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		resp, err := s.answer(query)
		if err != nil {
			s.t.Errorf("stub DNS server: a query it cannot answer: %v", err)
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
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
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go s.serve(server)
			return client, nil
		},
	}
	return r.LookupIPAddr
}

// setUpGoResolver makes Go's resolver read its configuration
// (resolv.conf, nsswitch.conf) outside any bubble. It does so on first
// use, with channels that belong to the bubble they were made in, and a
// lookup from elsewhere (another bubble, as with -count=2) would then
// crash the test binary.
func setUpGoResolver() {
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no DNS server: only the configuration is read")
		},
	}
	_, _ = r.LookupIPAddr(context.Background(), "setup.fanout.test")
}

func TestDNSWithStubServer(t *testing.T) {
	setUpGoResolver()
	// In a bubble each tick comes as soon as the test waits for it.
	synctest.Test(t, func(t *testing.T) {
		const name = "apiserver.fanout.test"
		stub := newStubDNS(t)
		stub.set(name, "10.0.0.2", "fd00::1", "10.0.0.1")

		lookupErrs := make(chan error, 16)
		m := NewMetrics()
		stubLookup := stub.lookup()
		d := &DNS{
			Host: name, Port: "6443", Interval: time.Second, Metrics: m,
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
		// (nil: nothing). Lookups start a second apart.
		start := time.Now()
		lookups := 0
		tick := func(wantErr func(error) bool, want []string) {
			t.Helper()
			lookups++
			select {
			case err := <-lookupErrs:
				if !wantErr(err) {
					t.Fatalf("lookup %d: error %v", lookups, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("lookup %d did not happen within 10s", lookups)
			}
			if got, want := time.Since(start), time.Duration(lookups-1)*time.Second; got != want {
				t.Fatalf("lookup %d after %s, want %s", lookups, got, want)
			}
			synctest.Wait() // the result is published, or not
			var got []Endpoint
			select {
			case got = <-updates:
			default:
			}
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
	})
}
