// Package top computes and renders `fanout top`: per-key rates, error
// shares and p99 latency from two snapshots of a sidecar's cost table
// (/debug/cost, components/cost's Snapshot) and the apiservers' share of
// requests (/debug/endpoints). Everything but Fetch is a pure function of
// the snapshots, so the table is tested without a terminal or a sidecar.
package top

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/fanout-dev/fanout/components/admin"
	"github.com/fanout-dev/fanout/components/cost"
)

// Snapshot is one look at a sidecar: its cost table and its endpoints.
type Snapshot struct {
	Cost      cost.Snapshot
	Endpoints admin.Snapshot
}

// ErrTableOff means the sidecar's cost table is off.
var ErrTableOff = errors.New("the cost table is off (fanout runs with --cost-table-size 0): there is nothing to show; restart fanout with --cost-table-size above 0")

// Fetch reads /debug/cost and then /debug/endpoints from the admin server
// at addr (host:port). A failed fetch says what to do: run it in the pod
// (403), upgrade fanout or turn the table on (404).
func Fetch(ctx context.Context, c *http.Client, addr string) (Snapshot, error) {
	cst, err := admin.FetchCost(ctx, c, addr)
	if err != nil {
		return Snapshot{}, err
	}
	if cst.Capacity == 0 {
		return Snapshot{}, ErrTableOff
	}
	// The endpoints come second: an address that does not answer fails
	// above with the cost table's own advice.
	eps, err := admin.FetchSnapshot(ctx, c, addr)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Cost: cst, Endpoints: eps}, nil
}

// errorCount is all of e's classes.
func errorCount(e cost.Errors) int64 { return e.Status4xx + e.Status5xx + e.Failed }

// resourcePath is group/resource/subresource as kubectl spells it, e.g.
// "apps/replicasets/status"; the core group shows as the resource alone.
func resourcePath(k cost.Key) string {
	s := k.Resource
	if k.Group != "" {
		s = k.Group + "/" + s
	}
	if k.Subresource != "" {
		s += "/" + k.Subresource
	}
	return s
}

// keyString orders keys for the sort's last tie.
func keyString(k cost.Key) string {
	return strings.Join([]string{k.Component, k.Verb, resourcePath(k), k.Scope}, " ")
}
