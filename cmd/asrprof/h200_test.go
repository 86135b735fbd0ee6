package main

import (
	"github.com/asrprof/asrprof/internal/bundletest"
	"github.com/asrprof/asrprof/internal/margin"
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
	t.Parallel()
	cpuHeavy(t) // 60 analyses of the recorded bundles
	for _, name := range h200Bundles {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.H200(t, name)
			for _, script := range []string{"sweep", "stages", "gpu", "cpu", "attribution", "bottleneck"} {
				checkH200Golden(t, dir, name, script)
			}
			checkH200Margins(t, dir, name)
		})
	}
}

// What the H200 bundles must say whatever the goldens hold: GPU samples
// with GPM for every level, Python frames from the otel engine, and the
// synthetic weights.
func TestH200BundlesHoldTheirData(t *testing.T) {
	t.Parallel()
	cpuHeavy(t)
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

// The servers that emit nothing, captured on the device with the default
// probes (tools/gpu-blackbox.sh; docs/GPU.md, "Servers that emit
// nothing"): each level's verdict seen from outside, and the blackbox and
// bottleneck tables against their goldens.
func TestH200BlackBox(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bundle string
		first  map[string]string // level → the verdict's prefix
		never  string            // what the bottleneck table must not say
	}{
		{bundle: "hf-serial", first: map[string]string{"c1": "host-bound", "c8": "serves one request at a time"}},
		{bundle: "hf-batch", first: map[string]string{"c1": "host-bound", "c8": "batches of up to"}},
		// float32, batches of up to 16 clips and 2 decode steps: the
		// encoder's work binds, so a batch of 14 takes about 14 times one
		// clip's. Advising "serve requests in parallel" for groups already
		// served together contradicted the row's own numbers (fixed
		// 2026-12-07, docs/GPU.md).
		{bundle: "hf-gpubatch-fp32", first: map[string]string{"c1": "GPU-bound", "c16": "answered in groups of up to 14"},
			never: "serve requests in parallel"},
		// four threads each running a generate on the shared model: torch
		// lets go of the GIL in its ops, so they ran 2.32 cores with 57 %
		// overlap at c=4 and took no turns; four busy threads at a
		// parallelism of 1.71 share something. "At most 2 in service"
		// before: a cap of 2, which the server does not have
		{bundle: "hf-threads", first: map[string]string{"c1": "host-bound", "c4": "4 threads in service at the pace of 1.7 served alone, host-bound service"},
			never: "took turns"},
		{bundle: "hf-threads-user", first: map[string]string{"c1": "host-bound", "c4": "4 threads in service at the pace of 1.9 served alone, host-bound service"},
			never: "took turns"},
		// the same as an ordinary user (proc bins, no uprobes)
		{bundle: "hf-gpubatch-fp32-user", first: map[string]string{"c1": "GPU-bound", "c16": "answered in groups of up to 12"},
			never: "serve requests in parallel"},
		// The whisper engine with its telemetry not taken, a cause known by
		// construction (docs/GPU.md, "The engine with no telemetry taken"),
		// as root and as an ordinary user (-user: no eBPF, no uprobes).
		{bundle: "bb-engine-spin", first: map[string]string{"c1": "GPU-bound", "c8": "GPU-bound"}},
		{bundle: "bb-engine-spin-user", first: map[string]string{"c1": "GPU-bound", "c8": "GPU-bound"}},
		{bundle: "bb-engine-host", first: map[string]string{"c8": "host-bound"}},
		{bundle: "bb-engine-host-user", first: map[string]string{"c8": "host-bound"}},
		{bundle: "bb-engine-fp32", first: map[string]string{"c64": "GPU-bound"}},
		{bundle: "bb-engine-fp32-user", first: map[string]string{"c64": "GPU-bound"}},
	} {
		t.Run(tc.bundle, func(t *testing.T) {
			dir := bundletest.H200(t, tc.bundle)
			got, text := verdicts(t, dir)
			for lv, want := range tc.first {
				if c := got[lv]; len(c) == 0 || !strings.HasPrefix(c[0], want) {
					t.Errorf("%s at %s: %q, want %q first\n%s", tc.bundle, lv, c, want, text)
				}
			}
			if tc.never != "" && strings.Contains(text, tc.never) {
				t.Errorf("%s says %q\n%s", tc.bundle, tc.never, text)
			}
			for _, script := range []string{"blackbox", "bottleneck"} {
				checkH200Golden(t, dir, tc.bundle, script)
			}
			checkH200Margins(t, dir, tc.bundle)
		})
	}
}

// h200NotAsserted are the H200 bundles' causes whose deciding figure lies
// within margin.Near of its threshold (issue 44): their rows are masked
// in the bottleneck goldens, and TestH200Goldens fails for any other such
// cause. The bundles are measurements of the device: they cannot be
// moved, so these rows are not asserted.
var h200NotAsserted = []margin.Exempt{
	margin.Exempted("study", "c8", 3, "admission behind first forwards", "MIN_SHARE", "a secondary state at 10.6 % of latency against 10 %"),
	margin.Exempted("study", "c8", 4, "busy thread", "BUSY_THREAD", "asr-sched at 0.90 of a core against 0.85"),
	margin.Exempted("study", "c32", 5, "busy thread", "BUSY_THREAD", "asr-sched at 0.87 of a core against 0.85"),
	margin.Exempted("study", "c64", 6, "unexplained wait", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %"),
	margin.Exempted("gpu-bound", "c16", 3, "busy thread", "BUSY_THREAD", "asr-sched at 0.92 of a core against 0.85"),
	margin.Exempted("gpu-bound", "c64", 5, "busy thread", "BUSY_THREAD", "asr-sched at 0.92 of a core against 0.85"),
	margin.Exempted("gpu-bound", "c128", 4, "busy thread", "BUSY_THREAD", "asr-sched at 0.93 of a core against 0.85"),
	margin.Exempted("host-bound", "c1", 2, "response delivery", "MIN_SHARE", "a secondary state at 10.6 % of latency against 10 %"),
	margin.Exempted("host-bound", "c8", 3, "admission behind first forwards", "MIN_SHARE", "a secondary state at 10.7 % of latency against 10 %"),
	margin.Exempted("host-bound", "c8", 4, "busy thread", "BUSY_THREAD", "asr-sched at 0.91 of a core against 0.85"),
	margin.Exempted("router-even", "c64", 4, "running batch (no thread data)", "MIN_SHARE", "a secondary state at 10.04 % of latency against 10 %"),
	margin.Exempted("router-even", "c64", 5, "busy thread", "BUSY_THREAD", "asr-sched at 0.854 of a core against 0.85"),
	margin.Exempted("router-slow", "c32", 1, "slow worker: gpu-w1", "SLOW_WORKER per second of audio", "the slow worker at 1.506× per second of audio against 1.5×: the verdict holds by 0.4 %"),
	margin.Exempted("router-slow", "c32", 5, "imbalanced router", "IMBALANCE", "the busiest worker at 1.29× its fair share against 1.25×"),
	margin.Exempted("fp32-attribution", "c64", 2, "GPU-bound", "MIN_SHARE", "a secondary state at 10.3 % of latency against 10 %"),
	margin.Exempted("graphs-attribution", "c8", 3, "GPU-bound", "GPU_BOUND_BUSY", "the GPU busy 51 % of the running time against 50 %: GPU-bound or host-bound decode is a coin toss"),
}

// checkH200Margins runs the margins analysis on the H200 bundle name and
// fails for a cause near its threshold that h200NotAsserted lacks (or an
// exemption no longer near).
func checkH200Margins(t *testing.T, dir, name string) {
	t.Helper()
	code, stdout, stderr := runCLI("analyze", dir, "margins", "--format", "json")
	if code != exitOK {
		t.Fatalf("analyze margins: exit %d\n%s", code, stderr)
	}
	rows, err := margin.Parse(stdout)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range margin.Check(name, rows, h200NotAsserted) {
		t.Error(e)
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
	if script == "bottleneck" {
		got = margin.Mask(got, name, h200NotAsserted)
	}
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
