// Package testkit is the one place for the scaffolding that tests across
// the module (and the e2e module) share, so that each package's tests
// stop carrying a copy of their own:
//
//   - the test PKI (NewCA, CA.Serving, CA.Client, CA.ServerTLSConfig,
//     WriteFile): throwaway certificates for TLS and client-certificate
//     authentication;
//   - a fake kube-apiserver (NewAPIServer): HTTP/2 over TLS with a
//     serving certificate from the PKI, /readyz answered as told, a
//     handler of the test's own for everything else, and a record of who
//     asked;
//   - a manual clock (Clock), a clock.Clock for code that takes its time
//     source as a value;
//   - what the tests of an HTTP client need around that server: handlers
//     that report what the server saw (Echo) or stream (Streaming), a
//     TCP proxy whose connections can go silent (FreezeProxy), and
//     request helpers (NewRequest, RoundTrip, RoundTripFunc, Wait,
//     WaitFor, bounded by WaitLimit).
//   - HTTP clients as client-go is one of fanout's listener (NewClient),
//     and raw requests no http.Client sends (RawRequest).
//   - a series read as /metrics would serve it (Registry, Series).
//   - a Buffer for logs written by other goroutines or processes.
//
// # synctest or Clock
//
// Production code reads time through internal/clock's clock.Clock (or a
// Now func taken from one, where it only reads the time). Tests use
// testing/synctest where the code waits on time and nothing blocks on
// the network inside the bubble; the code then keeps clock.Real. Else
// they inject a Clock.
//
// A test that waits on real time (sleeps, tickers, timeouts, polling
// until a deadline) should rather run inside testing/synctest's
// synctest.Test: time in the bubble is virtual and moves only when every
// goroutine in it is blocked, so such a test is fast and deterministic,
// and the code under test keeps the real clock (clock.Real).
//
// A bubble cannot wait for the network: a goroutine blocked on a socket,
// loopback included, is not durably blocked, so time stops and the test
// hangs. A test that talks to an APIServer can still run in a bubble if
// time only has to pass before the server serves: make the PKI in the
// bubble (its certificates are then valid at the bubble's time), make the
// server Unstarted, let time pass, then start it. Other tests that talk
// to an APIServer (or any listener) stay outside bubbles, and where they
// need to control time they inject a Clock: it implements clock.Clock,
// its Now fits the Now funcs of the packages under test, and Advance
// moves it.
//
// The fakes of what the proxy sends through (a picker, an upstream) live in
// components/proxy/proxytest, which may import fanout's components.
//
// Nothing here is fit for production use.
package testkit
