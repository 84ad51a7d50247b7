// Package testpki is the old name of the test PKI, now in
// internal/testkit.
//
// Deprecated: import github.com/fanout-dev/fanout/internal/testkit. This
// forwarder only keeps the tests of packages that move to testkit later
// building; delete it when nothing imports it.
package testpki

import "github.com/fanout-dev/fanout/internal/testkit"

// CA is testkit.CA.
type CA = testkit.CA

// KeyPair is testkit.KeyPair.
type KeyPair = testkit.KeyPair

// NewCA is testkit.NewCA.
var NewCA = testkit.NewCA

// WriteFile is testkit.WriteFile.
var WriteFile = testkit.WriteFile
