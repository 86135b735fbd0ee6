package main

import (
	"fmt"
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

// --target given as an OpenAI client's base_url (ending in /v1): asrprof
// adds the API path itself, so it trims it, says so, and keeps what was
// the trimmed one in the manifest; the requests succeed.
func TestCaptureTargetBaseURL(t *testing.T) {
	t.Parallel()
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	out := filepath.Join(t.TempDir(), "b")
	code, stdout, stderr := runCLI("capture", "--target", srv.URL+"/v1/", "--dataset", dataset(t, 2),
		"--concurrency", "1", "--repeats", "1", "--out", out, "--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off")
	want := fmt.Sprintf("note: --target %s/v1/ ends in the API's path, which asrprof adds itself: the target is %s (requests go to %s/v1/audio/transcriptions)", srv.URL, srv.URL, srv.URL)
	if code != exitOK || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 0 and %q\n%s%s", code, want, stdout, stderr)
	}
	var m struct {
		Config struct {
			Target string `json:"target"`
		} `json:"config"`
	}
	readJSONInto(t, filepath.Join(out, "manifest.json"), &m)
	if m.Config.Target != srv.URL {
		t.Errorf("manifest config: %+v", m.Config)
	}
}
