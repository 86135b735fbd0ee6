package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// The model field: with no --model, the capture names the one model the
// server lists at /v1/models (as vLLM's own benchmark does) and says so;
// a --model the server refuses gets a what-to-do that names the models
// it lists. The second server answers as vLLM does to an unknown model.
func TestCaptureModelFromServer(t *testing.T) {
	t.Parallel()
	srv := fakeasr.NewServer(t, fakeasr.Config{Model: "openai/whisper-large-v3"})
	out := filepath.Join(t.TempDir(), "b")
	code, stdout, stderr := runCLI("capture", "--target", srv.URL, "--dataset", dataset(t, 2),
		"--concurrency", "1", "--repeats", "1", "--out", out, "--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off")
	if want := "model: openai/whisper-large-v3 (the one model the server lists at /v1/models; --model names another)"; code != exitOK || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 0 and %q\n%s%s", code, want, stdout, stderr)
	}
	for _, r := range srv.Requests() {
		if r.Model != "openai/whisper-large-v3" {
			t.Errorf("request %d named model %q", r.N, r.Model)
		}
	}
	var m struct {
		Config struct {
			Model string `json:"model"`
		} `json:"config"`
	}
	readJSONInto(t, filepath.Join(out, "manifest.json"), &m)
	if m.Config.Model != "openai/whisper-large-v3" {
		t.Errorf("manifest config model %q, want the one sent", m.Config.Model)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"a-model","object":"model"},{"id":"b-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/audio/transcriptions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"object":"error","message":"The model %s does not exist.","type":"NotFoundError","param":null,"code":404}`, r.FormValue("model"))
	})
	two := httptest.NewServer(mux)
	t.Cleanup(two.Close)
	code, stdout, stderr = runCLI("capture", "--target", two.URL, "--dataset", dataset(t, 2), "--model", "whisper-1",
		"--concurrency", "1", "--repeats", "1", "--out", filepath.Join(t.TempDir(), "b2"), "--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off")
	want := "the requests named whisper-1 and the server lists a-model, b-model at /v1/models: give --model with one it lists"
	if code != exitNoSuccess || !strings.Contains(stdout, want) {
		t.Errorf("exit %d, want %d and %q\n%s%s", code, exitNoSuccess, want, stdout, stderr)
	}
	code, _, stderr = runCLI("capture", "--target", two.URL, "--dataset", dataset(t, 2),
		"--concurrency", "1", "--repeats", "1", "--out", filepath.Join(t.TempDir(), "b3"), "--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off")
	if want := "model: none named (the server lists 2 at /v1/models: a-model, b-model; --model picks one)"; code != exitNoSuccess || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, want %d and %q\n%s", code, exitNoSuccess, want, stderr)
	}
}

// A server started with an API key (vLLM's and SGLang's --api-key: every
// /v1 route wants "Authorization: Bearer KEY", else 401 Unauthorized):
// without --header every request fails and the advice names --header;
// with it the capture succeeds, its model check included, and no file of
// the bundle holds the key. A malformed --header is refused up front
// without echoing its value.
func TestCaptureHeaderAPIKey(t *testing.T) {
	t.Parallel()
	const key = "sk-test-41c7"
	srv := fakeasr.NewServer(t, fakeasr.Config{APIKey: key, Model: "keyed-model"})
	args := func(out string, extra ...string) []string {
		return append([]string{"capture", "--target", srv.URL, "--dataset", dataset(t, 2), "--concurrency", "1", "--repeats", "1",
			"--out", out, "--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off"}, extra...)
	}
	code, stdout, stderr := runCLI(args(filepath.Join(t.TempDir(), "none"))...)
	if want := `the server refused the requests' credentials: give its API key with --header "Authorization: Bearer KEY"`; code != exitNoSuccess || !strings.Contains(stdout, want) {
		t.Errorf("without the key: exit %d, want %d and %q\n%s%s", code, exitNoSuccess, want, stdout, stderr)
	}
	out := filepath.Join(t.TempDir(), "keyed")
	code, stdout, stderr = runCLI(args(out, "--header", "Authorization: Bearer "+key, "--header", "X-Route: a")...)
	if want := "model: keyed-model (the one model"; code != exitOK || !strings.Contains(stderr, want) {
		t.Fatalf("with the key: exit %d, want 0 and %q\n%s%s", code, want, stdout, stderr)
	}
	noFileHolds(t, out, key)
	// @FILE: the key out of the command line
	file := filepath.Join(t.TempDir(), "headers")
	if err := os.WriteFile(file, []byte("Authorization: Bearer "+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI(args(filepath.Join(t.TempDir(), "file"), "--header", "@"+file)...); code != exitOK {
		t.Errorf("--header @FILE: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	code, _, stderr = runCLI(args(bad, "--header", "Authorization Bearer "+key)...)
	if want := `--header: header 1: want "Name: value"`; code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stderr, key) {
		t.Errorf("a malformed header: exit %d, want %d, %q and no key\n%s", code, exitUsage, want, stderr)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a refused --header wrote %s (%v)", bad, err)
	}
}

// A server whose transcription endpoint is not the OpenAI API's (whisper.cpp's
// server answers POST /inference): --endpoint sends there; without it
// every request gets a 404 and the advice names --endpoint; a path
// without its slash, or --endpoint with a WebSocket protocol, is refused.
func TestCaptureEndpoint(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /inference", func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := r.FormFile("file"); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hits.Add(1)
		fmt.Fprint(w, `{"text":"hello"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	args := func(extra ...string) []string {
		return append([]string{"capture", "--target", srv.URL, "--dataset", dataset(t, 2), "--concurrency", "1", "--repeats", "1",
			"--out", filepath.Join(t.TempDir(), "b"), "--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off"}, extra...)
	}
	if code, stdout, stderr := runCLI(args("--endpoint", "/inference")...); code != exitOK || hits.Load() != 2 {
		t.Fatalf("--endpoint /inference: exit %d, %d requests there, want 0 and 2\n%s%s", code, hits.Load(), stdout, stderr)
	}
	code, stdout, stderr := runCLI(args()...)
	if want := "check --target (host, port), --endpoint (the path)"; code != exitNoSuccess || !strings.Contains(stdout, want) {
		t.Errorf("the default path: exit %d, want %d and %q\n%s%s", code, exitNoSuccess, want, stdout, stderr)
	}
	for _, tc := range [][]string{{"--endpoint", "inference"}, {"--endpoint", "/inference", "--protocol", "funasr-ws"}} {
		if code, _, stderr := runCLI(args(tc...)...); code != exitUsage || !strings.Contains(stderr, "--endpoint") {
			t.Errorf("%v: exit %d, want %d naming --endpoint\n%s", tc, code, exitUsage, stderr)
		}
	}
}

// noFileHolds fails the test where a file under dir holds secret.
func noFileHolds(t *testing.T, dir, secret string) {
	t.Helper()
	if err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret %q", p, secret)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A server on another machine: the gpu probe does not sample this
// machine's GPUs as if they were the server's (they would stand as its
// GPU in every table); on this machine it runs as before. The probes-only
// capture sends nothing, so the remote address needs no server.
func TestRemoteTargetNoLocalGPU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		target string
		remote bool
	}{{"http://192.0.2.1:8000", true}, {"http://127.0.0.1:8000", false}} {
		code, _, stderr := runCLI("capture", "--probes-only", "--target", tc.target, "--duration", "300ms", "--period", "100ms",
			"--server-metrics", "off", "--otlp-http", "off", "--otlp-grpc", "off", "--out", filepath.Join(t.TempDir(), "b"))
		said := strings.Contains(stderr, "probe gpu: off (192.0.2.1 is not this machine, so these GPUs are not the server's; --agent URL")
		if said != tc.remote || strings.Contains(stderr, "panic") {
			t.Errorf("%s: exit %d; the gpu probe kept off for a remote target: %v, want %v\n%s", tc.target, code, said, tc.remote, stderr)
		}
	}
}
