package testkit

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// NewRequest is a GET of https://addr+path with ctx.
func NewRequest(t testing.TB, ctx context.Context, addr, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// RoundTrip sends req and reads the whole body.
func RoundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	res, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return nil, err
	}
	return res, nil
}

// WaitFor polls cond; the bound is generous because only its failure, not
// its duration, is asserted.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RoundTripFunc is a function that is an http.RoundTripper.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f(r).
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
