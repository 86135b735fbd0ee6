package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// requireTorch skips where Debian's python3-torch is missing, and fails
// under CI (internal/need): make test installs it through tools/deps.sh.
func requireTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(refservertest.Python, "-c", "import torch").CombinedOutput(); err != nil {
		need.Dep(t, fmt.Sprintf("python3-torch (%s cannot import torch: %s)", refservertest.Python, bytes.TrimSpace(out)), err)
	}
}

func whisperCmd(port int, extra string) string {
	script := filepath.Join(refservertest.Root(), "refserver", "refserver.py")
	return fmt.Sprintf("%s %s --engine whisper --model tiny --device cpu --port %d %s", refservertest.Python, script, port, extra)
}

// whisperCapture is the command line of a one-run capture of the whisper
// engine (tiny, CPU) on port, 8 samples of ds per pass at levels, no probes.
func whisperCapture(port int, server, ds, out, levels string, extra ...string) []string {
	return append([]string{"capture", "--server-cmd", whisperCmd(port, server),
		"--runs", "1", "--target", fmt.Sprintf("http://127.0.0.1:%d", port),
		"--dataset", ds, "--max-samples", "8", "--concurrency", levels, "--repeats", "1", "--out", out, "--quiet", "--verbose",
		"--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none",
		"--gpu-free-mib", "100000000", "--startup-timeout", "3m", "--timeout", "60s"}, extra...)
}

// The whisper engine (tiny config, CPU) under `asrprof capture
// --server-cmd`, as a user runs it: its events and stages reach the
// bundle and the tables, overlapping requests share decode steps, and the
// synthetic weights are said where WER is shown.
func TestCaptureWhisperEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whisper engine")
	}
	requireTorch(t) // not parallel: PyTorch on the CPU timed out a request beside the parallel phase's servers
	// the refset's short clips (about 4 s): 2.2 s a request at c=1 here,
	// not the 2.9 s of its first, longest ones
	ds := refservertest.ShortClips(t, 8)
	port := fakeasr.FreePort(t)
	out := filepath.Join(t.TempDir(), "whisper")
	code, stdout, stderr := runCLI(whisperCapture(port, "--max-running-requests 4 --build-workers 2", ds, out, "1,4",
		"--profile-url", fmt.Sprintf("http://127.0.0.1:%d", port), "--span-grace", "500ms")...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	b := filepath.Join(out, "run-1")
	// Events: every scored request went through every stage.
	type event struct {
		RequestID string         `json:"request_id"`
		Name      string         `json:"event_name"`
		Meta      map[string]any `json:"metadata"`
	}
	byReq := map[string]map[string]event{}
	if _, err := bundle.ReadJSONL(filepath.Join(b, bundle.EventsFile), func(e event) error {
		if byReq[e.RequestID] == nil {
			byReq[e.RequestID] = map[string]event{}
		}
		byReq[e.RequestID][e.Name] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(byReq) < 16 { // 8 samples × (c=1, c=4)
		t.Fatalf("events for %d requests, want 16", len(byReq))
	}
	type span struct{ first, last, batch float64 }
	var done []span
	for id, evs := range byReq {
		for _, name := range []string{"stage_input_received", "scheduler_request_build_start", "scheduler_request_build_end",
			"scheduler_queue_enter", "scheduler_prefill_start", "scheduler_prefill_end", "scheduler_first_emit", "stage_complete"} {
			if _, ok := evs[name]; !ok {
				t.Errorf("request %s has no %s event", id, name)
			}
		}
		m := evs["stage_complete"].Meta
		f, fok := m["first_step"].(float64)
		l, lok := m["last_step"].(float64)
		mb, _ := m["max_batch"].(float64)
		if !fok || !lok {
			t.Errorf("request %s: stage_complete metadata %v lacks first_step/last_step", id, m)
			continue
		}
		done = append(done, span{f, l, mb})
	}
	// Batching: two requests took part in one decode step.
	shared, maxBatch := false, 0.0
	for i := range done {
		maxBatch = max(maxBatch, done[i].batch)
		for j := i + 1; j < len(done); j++ {
			shared = shared || (done[i].first <= done[j].last && done[j].first <= done[i].last)
		}
	}
	if !shared || maxBatch < 2 {
		t.Errorf("no two requests shared a decode step (max_batch %v): %v", maxBatch, done)
	}
	// Stages and the synthetic-weights note in what the user reads (a
	// runbook prints each run's tables on stdout, then its verdict; its
	// progress on stderr).
	for _, want := range []string{"Stages", "first forward", "decode tail", "c=4", "synthetic weights", "WER is not a measurement"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("capture output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stderr, "Stages (ms") {
		t.Errorf("a table on stderr:\n%s", stderr)
	}
	code, show, _ := runCLI("analyze", b, "stages", "--format", "json")
	if code != exitOK {
		t.Fatalf("analyze stages: exit %d", code)
	}
	var doc jsonTables
	if err := json.Unmarshal([]byte(show), &doc); err != nil || len(doc.Tables) == 0 {
		t.Fatalf("analyze stages --format json: %v\n%s", err, show)
	}
	if rows := doc.Tables[0].Rows; len(rows) != 2 {
		t.Errorf("stage table has %d rows, want c=1 and c=4:\n%s", len(rows), show)
	}
}

// Beyond --build-max-pending the engine answers 503, and the capture
// counts those requests as failed HTTP 5xx.
func TestCaptureWhisperOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whisper engine")
	}
	requireTorch(t) // not parallel: PyTorch on the CPU timed out a request beside the parallel phase's servers
	ds := refservertest.ShortClips(t, 8)
	port := fakeasr.FreePort(t)
	out := filepath.Join(t.TempDir(), "overload")
	code, stdout, stderr := runCLI(whisperCapture(port, "--max-running-requests 2 --build-workers 1 --build-max-pending 1 --build-delay 0.3",
		ds, out, "8", "--span-grace", "100ms")...)
	if code != exitIncomplete {
		t.Fatalf("exit %d, want %d (requests were rejected)\n%s\n%s", code, exitIncomplete, stdout, stderr)
	}
	n503 := 0
	if _, err := bundle.ReadJSONL(filepath.Join(out, "run-1", bundle.RequestsFile), func(r struct {
		HTTPStatus int `json:"http_status"`
	}) error {
		if r.HTTPStatus == 503 {
			n503++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n503 == 0 {
		t.Errorf("no request was answered 503 beyond the build backlog\n%s", stdout)
	}
	if !strings.Contains(stdout+stderr, "http_5xx") {
		t.Errorf("the verdict does not name the 5xx failures:\n%s\n%s", stdout, stderr)
	}
}

// jsonTables is `analyze --format json`'s document.
type jsonTables struct {
	Tables []struct {
		Name    string   `json:"name"`
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
	} `json:"tables"`
}
