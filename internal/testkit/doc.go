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
//   - what the tests of an HTTP client need around that server: handlers
//     that report what the server saw (Echo) or stream (Streaming), a
//     TCP proxy whose connections can go silent (FreezeProxy), and
//     request helpers (NewRequest, RoundTrip, RoundTripFunc, Wait,
//     WaitFor, bounded by WaitLimit);
//   - HTTP clients as client-go is one of fanout's listener (NewClient),
//     and raw requests no http.Client sends (RawRequest);
//   - HTTP/2 servers for the tests of fanout's own clients: an APIServer's
//     options (H2Options), a hand-driven server for frames net/http never
//     sends (NewRawH2), and for their benchmarks a short answer and a
//     parallel run that reports CPU (ShortAnswer, RunParallelCPU,
//     ReportCPU);
//   - servers and connections that end with the test (Start, Dial);
//   - fanout's binaries run as a user runs them (RunBinary, StartLogged,
//     CheckExit, CheckStartFailure, CheckOneCause);
//   - a series read as /metrics would serve it (Registry, Series);
//   - a Buffer for logs written by other goroutines or processes, and
//     klog silenced for a package's tests (DiscardKlog).
//
// # Time
//
// fanout's code reads the time package; tests move time with
// testing/synctest (synctest.Test, time.Sleep, synctest.Wait), the one way
// to fake it here. Time in a bubble moves only when every goroutine in it
// is durably blocked, so such a test is exact and fast.
//
// A goroutine blocked on a real socket (loopback included) or in a system
// call is not durably blocked: while one is, the bubble's clock stands
// still. So a test in a bubble talks HTTP over httptest.NewTestServer's
// in-memory network (its Client, or its Client's Transport, reaches the
// server whatever the host). A test that must use real sockets (fanout's
// own TLS dialer, an APIServer) can still run in a bubble if time only has
// to pass before the server serves: make the PKI in the bubble (its
// certificates are then valid at the bubble's time), make the server
// Unstarted, let time pass, then start it. A test that needs inotify or
// spins a goroutine stays on real time and asserts on events or
// counters, never on a fixed sleep.
//
// The fakes of what the proxy sends through (a picker, an upstream) live in
// components/proxy/proxytest, which may import fanout's components.
//
// Nothing here is fit for production use.
package testkit
