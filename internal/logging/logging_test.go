package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	var b bytes.Buffer
	New("json", 0, &b).Debug("hidden")
	New("json", 0, &b).Info("shown", "k", "v")
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["k"] != "v" {
		t.Fatalf("json at -v 0 wrote %q (%v); want one JSON record, no debug", b.String(), err)
	}
	b.Reset()
	New("text", 1, &b).Debug("debug")
	if !strings.Contains(b.String(), "level=DEBUG msg=debug") {
		t.Fatalf("text at -v 1 wrote %q; want a debug text record", b.String())
	}
}

// TestRequestLevel: the line per request shows from -v 4 only.
func TestRequestLevel(t *testing.T) {
	for v, want := range map[int]bool{0: false, 1: false, 2: false, 3: false, 4: true, 5: true} {
		var b bytes.Buffer
		l := New("text", v, &b)
		if got := l.Enabled(context.Background(), LevelRequest); got != want {
			t.Errorf("-v %d: request lines enabled %v, want %v", v, got, want)
		}
		l.Log(context.Background(), LevelRequest, "request")
		if got := strings.Contains(b.String(), "level=DEBUG-4 msg=request"); got != want {
			t.Errorf("-v %d wrote %q; want a request line: %v", v, b.String(), want)
		}
		if v >= 1 && !l.Enabled(context.Background(), -4) {
			t.Errorf("-v %d: debug lines are off", v)
		}
	}
}
