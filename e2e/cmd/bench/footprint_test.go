package main

import "testing"

// TestParseMemStats reads the MemStats block a debug=1 heap profile ends
// with, including the "inuse / sys" pairs.
func TestParseMemStats(t *testing.T) {
	text := "heap profile: 1: 2 [3: 4] @ heap/1048576\n\n# runtime.MemStats\n# Alloc = 4120576\n# HeapInuse = 5242880\n# HeapObjects = 12069\n# Stack = 753664 / 753664\n# MSpan = 98560 / 114240\n# GCCPUFraction = 0.001\n"
	got := parseMemStats(text)
	for k, want := range map[string]uint64{"Alloc": 4120576, "HeapInuse": 5242880, "HeapObjects": 12069, "Stack": 753664, "MSpan": 98560} {
		if got[k] != want {
			t.Errorf("%s = %d, want %d", k, got[k], want)
		}
	}
	if _, ok := got["GCCPUFraction"]; ok {
		t.Error("a float was read as a byte count")
	}
}
