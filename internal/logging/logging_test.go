package logging

import (
	"bytes"
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
