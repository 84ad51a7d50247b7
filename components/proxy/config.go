package proxy

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"time"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/watch"
	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// Config configures the Handler (the listener in front of it is
// components/listener). The zero value of every
// field means its default.
type Config struct {
	// MaxReplayBody is the largest request body kept in memory so the
	// request can be retried on another endpoint. Larger bodies stream
	// through and are never retried. Default 1 MiB; values above
	// MaxReplayBodyLimit are lowered to it; negative disables buffering.
	MaxReplayBody int64
	// ReplayBudget bounds the bodies kept for retries by all requests
	// together. A body that finds it spent streams through once and is
	// never retried, as one over MaxReplayBody does; a request without a
	// body takes none. 0 is AutoReplayBudget of the process's Go memory
	// limit when New runs (--replay-budget auto); negative keeps no body
	// (every body streams once).
	ReplayBudget int64
	// AnswerBudget, when set, lends the copy buffers of short answers:
	// 32 KiB each while it has room, 2 KiB beyond it, so that answers a
	// client stops reading hold at most 2 KiB each past the budget. The
	// engine sets the transport's answer window budget
	// (--answer-window-budget), which the upstream stream windows grow
	// with too. nil: every copy takes 32 KiB.
	AnswerBudget *budget.Bytes

	// Upgrades dials the connections of upgrade requests (exec, attach,
	// port-forward); *transport.Transports is one. nil answers upgrade
	// requests with 501. The engine sets it to its transports unless the
	// Config names a dialer of its own.
	Upgrades UpgradeDialer

	// Rebalancer, when set, ends watches on an apiserver that holds more
	// than its share (components/watch); nil leaves watch bodies
	// unwrapped. The 410 retry is on either way.
	Rebalancer *watch.Rebalancer

	// RetryBudget caps the retries to another endpoint. nil means
	// DefaultRetryBudget; a budget that is set is used as it is, so that
	// a Ratio of 0 means no retries beyond Min (--retry-budget 0).
	RetryBudget *RetryBudget

	// Cost, when set, is told what each request cost (components/cost:
	// the table of who costs what); nil turns the accounting off and
	// costs nothing. A nil *cost.Table (a table that is off) must be left
	// out, not set: the interface would not be nil.
	Cost CostTable

	// Discovery, when set, answers discovery requests itself while the
	// endpoints serve different APIs (components/apis); nil sends every
	// request to an apiserver.
	Discovery Discovery

	// Log takes the lines the reverse proxy writes itself (a broken
	// stream mid-body), and one line per request as it ends at
	// logging.LevelRequest (-v 4); nil discards them. The engine sets it
	// to its Config.Log.
	Log *slog.Logger

	// EndpointHeader adds EndpointHeader and AttemptsHeader to every
	// answer: the apiserver that answered (or, on fanout's own error
	// answer, the last one tried) and how many times the request was sent
	// (--debug-endpoint-header). Off by default: it tells the client the
	// apiservers' addresses. Upgrades (exec, attach, port-forward) pass
	// their answer through as it came and carry neither.
	EndpointHeader bool
}

// CostTable is where the Handler reports what each request cost; it is
// satisfied by *cost.Table. Every method is called on the request path,
// concurrently, and must be cheap. A short request is reported once its
// answer has ended (Short); a long-running one once it is answered (Open)
// and again when it ends (Close, with the Row Open returned).
type CostTable interface {
	Short(info *reqinfo.Info, userAgent string, o *cost.Outcome)
	Open(info *reqinfo.Info, userAgent string, o *cost.Outcome) *cost.Row
	Close(r *cost.Row, o *cost.Outcome)
}

var _ CostTable = (*cost.Table)(nil)

// RetryBudget caps the retries to another endpoint (after a shutdown
// answer, an overload or other 429, or an unprocessed request) at Ratio of
// the requests over Window, plus Min per Window, as Finagle's RetryBudget
// does.
type RetryBudget struct {
	// Ratio is the fraction of the requests that may be retried, within
	// [0, 1]; 0 allows Min retries per Window and no more.
	Ratio float64
	// Min is how many retries each Window allows whatever the request
	// rate; 0 allows none beyond Ratio.
	Min int
	// Window is the sliding window, in whole seconds, at least one.
	Window time.Duration
}

// DefaultRetryBudget is the budget of a Config whose RetryBudget is nil:
// 10% of the requests plus 10 retries, over 10s.
func DefaultRetryBudget() RetryBudget {
	return RetryBudget{Ratio: DefaultRetryBudgetRatio, Min: DefaultRetryBudgetMin, Window: DefaultRetryBudgetWindow}
}

// Defaults of Config.
const (
	DefaultMaxReplayBody     = 1 << 20
	DefaultRetryBudgetRatio  = 0.1
	DefaultRetryBudgetMin    = 10
	DefaultRetryBudgetWindow = 10 * time.Second
)

// DefaultReplayBudget is the most AutoReplayBudget gives, and what it
// gives without a memory limit; MinAutoReplayBudget the least.
const (
	DefaultReplayBudget = 64 << 20
	MinAutoReplayBudget = 4 << 20
)

// MaxReplayBodyLimit caps MaxReplayBody: kube-apiserver rejects bodies over
// 3 MiB (its --max-request-body-bytes default), so keeping more in memory
// could never make a retry succeed.
const MaxReplayBodyLimit = 3 << 20

// AutoReplayBudget is the replay budget for a Go memory limit of limit
// bytes (debug.SetMemoryLimit; math.MaxInt64 means none): an eighth of it,
// within [MinAutoReplayBudget, DefaultReplayBudget], and
// DefaultReplayBudget without a limit. Under the injected sidecar's 256Mi
// (a Go limit of 90% of it) that is 28.8 MiB; docs/security.md sums it
// with the other bounds.
func AutoReplayBudget(limit int64) int64 {
	if limit <= 0 || limit == math.MaxInt64 {
		return DefaultReplayBudget
	}
	return min(max(limit/8, MinAutoReplayBudget), DefaultReplayBudget)
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if b := c.RetryBudget; b != nil && (b.Ratio < 0 || b.Ratio > 1 || b.Min < 0 || b.Window < time.Second) {
		return fmt.Errorf("--retry-budget must be within [0, 1] and --retry-budget-min at least 0, with a window of at least 1s; got %v, %d and %v (RetryBudget; nil means the defaults)", b.Ratio, b.Min, b.Window)
	}
	return nil
}

func (c Config) withDefaults() Config {
	switch {
	case c.MaxReplayBody == 0:
		c.MaxReplayBody = DefaultMaxReplayBody
	case c.MaxReplayBody < 0:
		c.MaxReplayBody = 0
	case c.MaxReplayBody > MaxReplayBodyLimit:
		c.MaxReplayBody = MaxReplayBodyLimit
	}
	switch {
	case c.ReplayBudget == 0:
		c.ReplayBudget = AutoReplayBudget(debug.SetMemoryLimit(-1))
	case c.ReplayBudget < 0:
		c.ReplayBudget = 0
	}
	if c.RetryBudget == nil {
		b := DefaultRetryBudget()
		c.RetryBudget = &b
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}
