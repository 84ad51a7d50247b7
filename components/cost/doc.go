// Package cost keeps the bounded table of who costs what: per component
// (the client program, and the controller within it, read from the
// User-Agent), verb, API group, resource, subresource and scope, what the
// requests through fanout cost: how many, their errors and retries, the
// time short ones took, the bytes each way, and the watches held open and
// their events. The proxy reports each request once (Table.Short, or
// Table.Open and Table.Close for a long-running one); the admin server
// serves a Snapshot as /debug/cost, and a Collector exports the costliest
// keys to Prometheus. See docs/cost.md.
//
// The table holds at most Config.Size keys (an LRU): the counts of an
// evicted key fold into one "other" row, so totals stay exact however
// many distinct keys clients make up, and memory stays bounded.
package cost
