// Package clock is the one time source of fanout's production code: the
// Clock interface with its Timer and Ticker, and Real, the clock of the
// time package.
//
// Tests fake time with testing/synctest where the code waits on time and
// nothing blocks on the network inside the bubble; such code reads the
// time package and takes no clock (the watch rebalancer, the API
// discoverer). Code whose tests talk over sockets reads time through a
// clock.Clock, or through a Now func taken from one (clk.Now) where it
// only reads the time, and its tests inject internal/testkit.Clock,
// which implements Clock and moves only when the test advances it; the
// engine builds one Clock and hands it, or its Now, to those parts, so
// that all of them agree on what time it is.
package clock
