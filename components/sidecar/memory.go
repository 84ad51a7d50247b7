package sidecar

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/runtimetune"
)

// Sizing to the memory limit (docs/security.md, "The sum of the memory
// bounds"). --max-connections and --replay-budget default to auto: a
// share of the Go memory limit in effect once runtimetune.Apply ran
// (--memory-limit: 90% of the container's cgroup limit, or GOMEMLIMIT),
// so that what a hostile local client can make fanout hold adds up to
// less than the limit. Without a memory limit they are the fixed
// defaults of the listener and the proxy. A value given on the command
// line wins. The replay budget's auto is the proxy's own
// (proxy.AutoReplayBudget), so that the library gets it too; the header
// budget's is the listener's (listener.AutoHeaderBudget), the answer
// window budget's the transport's (transport.AutoAnswerWindowBudget).
const (
	// connectionCost is what an open client connection may hold in fanout
	// while it sends a request header of ordinary size: the server's
	// buffers, its goroutine and stack, the kernel socket not counted.
	// TestSumOfMemoryBounds (cmd/fanout) measured 16.7-17.2 KiB and fails
	// above 32 KiB.
	connectionCost = 32 << 10
	// connectionShare: idle connections get a quarter of the limit.
	connectionShare = 4
	// minAutoConnections is the least auto gives, whatever the limit: a
	// client with a few dozen HTTP/1.1 watches needs a connection each.
	minAutoConnections = 256
)

// sizedToMemory returns the auto values for a Go memory limit of limit
// bytes (math.MaxInt64: none): --max-connections, limit/4 over
// connectionCost, within [minAutoConnections, the listener's default];
// --replay-budget, proxy.AutoReplayBudget.
func sizedToMemory(limit int64) (connections int, replay int64) {
	replay = proxy.AutoReplayBudget(limit)
	if limit <= 0 || limit == math.MaxInt64 {
		return listener.DefaultMaxConnections, replay
	}
	connections = int(min(max(limit/connectionShare/connectionCost, minAutoConnections), listener.DefaultMaxConnections))
	return connections, replay
}

// sizeToMemory fills in --max-connections if left at auto (0) for the Go
// memory limit limit, and logs the auto values; the proxy sizes a
// --replay-budget and the listener a --header-budget left at auto
// themselves, to the same limit.
func (c *Config) sizeToMemory(limit int64, log *slog.Logger) {
	conns, replay := sizedToMemory(limit)
	if c.Listener.MaxConnections == 0 {
		c.Listener.MaxConnections = conns
		log.Info("--max-connections auto", "connections", conns, "goMemoryLimitBytes", limit)
	}
	if c.Engine.Proxy.ReplayBudget == 0 {
		log.Info("--replay-budget auto", "bytes", replay, "goMemoryLimitBytes", limit)
	}
	if c.Engine.Transport.AnswerWindowBudget == 0 {
		log.Info("--answer-window-budget auto", "bytes", transport.AutoAnswerWindowBudget(limit), "goMemoryLimitBytes", limit)
	}
	if c.Listener.HeaderBudget == 0 {
		log.Info("--header-budget auto", "bytes", listener.AutoHeaderBudget(limit, c.Listener.MaxHeaderBytes), "goMemoryLimitBytes", limit)
	}
}

// autoInt is a flag that takes auto (0) or a positive whole number.
type autoInt struct {
	flag string
	v    *int
}

func (a autoInt) String() string {
	if a.v == nil || *a.v == 0 {
		return "auto"
	}
	return strconv.Itoa(*a.v)
}

func (a autoInt) Set(s string) error {
	if s == "auto" {
		*a.v = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return fmt.Errorf("%s must be auto or a positive whole number, got %q", a.flag, s)
	}
	*a.v = n
	return nil
}

func (autoInt) Type() string { return "auto|int" }

// autoSize is a flag that takes auto (0), off (-1) or a size (96Mi).
type autoSize struct {
	flag string
	v    *int64
}

func (a autoSize) String() string {
	switch {
	case a.v == nil || *a.v == 0:
		return "auto"
	case *a.v < 0:
		return "off"
	}
	return strconv.FormatInt(*a.v, 10)
}

func (a autoSize) Set(s string) error {
	switch s {
	case "auto":
		*a.v = 0
		return nil
	case "off", "0":
		*a.v = -1
		return nil
	}
	n, err := runtimetune.ParseSize(s)
	if err != nil {
		return fmt.Errorf("%s: want auto, off or a size such as 32Mi: %v", a.flag, err)
	}
	*a.v = n
	return nil
}

func (autoSize) Type() string { return "auto|off|size" }
