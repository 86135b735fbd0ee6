package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
)

// A WebSocket protocol against a server that refuses the upgrade (an
// HTTP-only server): the validity table names the refusal, not only a
// bare status.
func TestCaptureWebSocketRefused(t *testing.T) {
	t.Parallel()
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	target := "ws" + strings.TrimPrefix(srv.URL, "http")
	code, stdout, stderr := runCLI("capture", "--protocol", "funasr-ws", "--target", target, "--dataset", dataset(t, 2),
		"--concurrency", "1", "--repeats", "1", "--out", filepath.Join(t.TempDir(), "b"), "--quiet",
		"--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off")
	if want := "× HTTP 404: WebSocket upgrade refused (is the target a WebSocket endpoint?)"; code != exitNoSuccess || !strings.Contains(stdout, want) {
		t.Errorf("exit %d, want %d and %q\n%s%s", code, exitNoSuccess, want, stdout, stderr)
	}
}
