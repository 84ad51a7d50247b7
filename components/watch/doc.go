// Package watch holds fanout's watch features, which act on the bodies
// of long-running responses the proxy forwards:
//
//   - rebalancing (Rebalancer): ending watches on an endpoint that holds
//     more than its share, between two events, so that clients re-watch
//     on a lighter one without re-listing;
//   - framing (frame.go, stream.go): where one watch event ends in a JSON
//     or protobuf stream, and what the rebalancer needs from it;
//   - the 410 retry (gone.go): a watch that a young apiserver answers
//     with 410 Gone is sent once more to the oldest one.
//
// The proxy reaches them through one Hook: Prepare before it sends a
// long-running request, Track on the response. The package does not
// import the proxy; the request's classification comes from reqinfo, and
// the 410 retry's second attempt from the proxy's attempt policy
// (Resend).
package watch
