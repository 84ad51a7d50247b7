// Package clock is the one time source of fanout's production code: the
// Clock interface with its Timer and Ticker, and Real, the clock of the
// time package.
//
// Production code reads time through a clock.Clock, or through a Now
// func taken from one (clk.Now) where a package only reads the time; the
// engine builds one Clock and hands it, or its Now, to every part, so
// that all of them agree on what time it is. Tests use testing/synctest
// where the code waits on time and nothing blocks on the network inside
// the bubble (the code then keeps Real), else internal/testkit.Clock,
// which implements Clock and moves only when the test advances it.
package clock
