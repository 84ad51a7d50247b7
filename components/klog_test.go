package components

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestRedactHandler: credentials in headers, strings, errors and groups,
// passed per record or bound with WithAttrs, are replaced before the next
// handler formats them; other values pass unchanged.
func TestRedactHandler(t *testing.T) {
	const token = "t0ken-5ecret"
	hdr := http.Header{
		"Authorization":          {"Bearer " + token},
		"Cookie":                 {"session=" + token},
		"Sec-Websocket-Protocol": {"v5.channel.k8s.io, " + wsBearerPrefix + token},
		"User-Agent":             {"kubectl"},
	}
	var buf bytes.Buffer
	log := slog.New(redactHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.Level(-10)})})
	log.With("bound", hdr).WithGroup("g").Log(context.Background(), slog.Level(-6), "sending Bearer "+token,
		"headers", hdr,
		"raw", map[string][]string(hdr),
		"text", "Authorization: Bearer "+token,
		"err", errors.New("dial failed for bearer "+token),
		slog.Group("nested", "headers", hdr))
	out := buf.String()
	if strings.Contains(out, token) {
		t.Errorf("the token survived: %s", out)
	}
	for _, want := range []string{"Authorization:[[redacted]]", wsBearerPrefix + "[redacted]", "v5.channel.k8s.io", "User-Agent:[kubectl]", "sending [redacted]"} {
		if !strings.Contains(out, want) {
			t.Errorf("the line lacks %q: %s", want, out)
		}
	}
	if hdr.Get("Authorization") != "Bearer "+token {
		t.Errorf("the logged header itself was changed: %v", hdr)
	}
}
