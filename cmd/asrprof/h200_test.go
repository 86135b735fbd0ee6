package main

import (
	"github.com/asrprof/asrprof/internal/bundletest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/refserver/refservertest"
)

// The bundles of the H200 study (tools/gpu-study.sh, docs/GPU.md): the
// whisper engine in its three states, captured through the CLI on the
// device, kept as testdata/h200/NAME.tgz (server-events/ left out: the
// bundle's events.jsonl holds the same lines).
var h200Bundles = []string{"study", "gpu-bound", "host-bound", "router-even", "router-slow", "engine-attribution", "fp32-attribution", "spin-attribution", "tuned-attribution", "graphs-attribution"}

// The analyses users run on a GPU capture, through the CLI, on the real
// H200 bundles: gpu, cpu and bottleneck (and the sweep and stages they
// stand on) against goldens in testdata/h200/golden/NAME/SCRIPT.txt
// (go test -run H200 -update rewrites them).
func TestH200Goldens(t *testing.T) {
	for _, name := range h200Bundles {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.H200(t, name)
			for _, script := range []string{"sweep", "stages", "gpu", "cpu", "attribution", "bottleneck"} {
				checkH200Golden(t, dir, name, script)
			}
		})
	}
}

// What the H200 bundles must say whatever the goldens hold: GPU samples
// with GPM for every level, Python frames from the otel engine, and the
// synthetic weights.
func TestH200BundlesHoldTheirData(t *testing.T) {
	for _, name := range h200Bundles {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.H200(t, name)
			_, gpu, _ := runCLI("analyze", dir, "gpu", "--format", "json")
			_, cpu, _ := runCLI("analyze", dir, "cpu")
			_, sweep, _ := runCLI("analyze", dir, "sweep")
			for _, want := range []string{`"SM active %"`, `"tensor active %"`, `"power mean (W)"`} {
				if !strings.Contains(gpu, want) {
					t.Errorf("gpu table lacks %s", want)
				}
			}
			if strings.Contains(gpu, "no GPU samples") {
				t.Error("gpu table says there are no GPU samples")
			}
			// the attribution bundles travel without their CPU profiles (size)
			if !strings.HasSuffix(name, "-attribution") && !strings.Contains(cpu, "whisper_model.py") {
				t.Error("cpu tables name no frame of the engine's Python code (otel engine)")
			}
			if !strings.Contains(sweep, "WER is not a measurement") {
				t.Error("sweep does not say the weights are synthetic")
			}
		})
	}
}

// The Transformers Whisper servers that emit nothing, captured on the H200
// with the default probes (tools/gpu-blackbox.sh; docs/GPU.md, "Servers
// that emit nothing"): each level's verdict seen from outside, and the
// blackbox and bottleneck tables against their goldens.
func TestH200BlackBox(t *testing.T) {
	for _, tc := range []struct {
		bundle string
		first  map[string]string // level → the verdict's prefix
	}{
		{"hf-serial", map[string]string{"c1": "host-bound", "c8": "serves one request at a time"}},
		{"hf-batch", map[string]string{"c1": "host-bound", "c8": "batches of up to"}},
	} {
		t.Run(tc.bundle, func(t *testing.T) {
			dir := bundletest.H200(t, tc.bundle)
			got, text := verdicts(t, dir)
			for lv, want := range tc.first {
				if c := got[lv]; len(c) == 0 || !strings.HasPrefix(c[0], want) {
					t.Errorf("%s at %s: %q, want %q first\n%s", tc.bundle, lv, c, want, text)
				}
			}
			for _, script := range []string{"blackbox", "bottleneck"} {
				checkH200Golden(t, dir, tc.bundle, script)
			}
		})
	}
}

// checkH200Golden compares `analyze DIR SCRIPT` on the H200 bundle name
// with testdata/h200/golden/NAME/SCRIPT.txt (-update rewrites it).
func checkH200Golden(t *testing.T, dir, name, script string) {
	t.Helper()
	code, stdout, stderr := runCLI("analyze", dir, script)
	if code != exitOK {
		t.Fatalf("analyze %s: exit %d\n%s", script, code, stderr)
	}
	path := filepath.Join(refservertest.Root(), "testdata", "h200", "golden", name, script+".txt")
	got := strings.ReplaceAll(stdout, dir, "BUNDLE")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run H200 -update writes it)", err)
	}
	if string(want) != got {
		t.Errorf("analyze %s %s differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", name, script, path, got, want)
	}
}
