package main

import (
	"context"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// The -node option: a real kubelet node with the injector and the example
// Deployments of manifests/, so the demo shows what a user of the injected
// sidecar sees, pods with fanout beside them and their share of the
// apiservers. newNodeDemo (nodedemo.go) makes it; the demo draws the
// panel's lines and its clients' rows in the table, and tears the node
// down with the rest (harness.Teardown).
var newNodeDemo func() nodeDemo

// nodeDemo brings up the node and what runs on it.
type nodeDemo interface {
	// Options adjusts the control plane before it starts, e.g. fewer
	// fake nodes or the kubelet client certificates.
	Options(*harness.Options)
	// Start runs once the control plane is up: the node, the injector and
	// the labelled Deployments. Progress goes to logf (plain lines, before
	// the table takes the screen).
	Start(ctx context.Context, cp *harness.ControlPlane, logf func(format string, args ...any)) (nodePanel, error)
}

// nodePanel is the node's part of each frame.
type nodePanel interface {
	// Clients are the in-pod clients whose requests and watches the table
	// shows beside the demo's own, found by user name in the audit logs
	// (e.g. harness.ControllerManagerUsers).
	Clients() []auditClient
	// Lines returns the lines drawn below the table, such as each pod's
	// phase and its fanout container's readiness. It is called once per
	// frame and should answer within a second. cp.AdminClient talks to
	// apiserver 1 only, which a rolling restart takes down for a while:
	// show the error then, rather than wait.
	Lines(ctx context.Context) []string
}

// auditClient is a client the table knows only from the audit logs.
type auditClient struct {
	label, note string
	match       func(username string) bool
}
