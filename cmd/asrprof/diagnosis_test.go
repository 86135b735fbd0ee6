package main

import (
	"encoding/json"
	"fmt"
	"github.com/asrprof/asrprof/internal/bundletest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// verdicts reads `analyze DIR bottleneck --format json`: level → the
// causes in rank order, and each row's evidence.
func verdicts(t *testing.T, dir string) (map[string][]string, string) {
	t.Helper()
	code, out, stderr := runCLI("analyze", dir, "bottleneck", "--format", "json")
	if code != exitOK {
		t.Fatalf("analyze bottleneck: exit %d\n%s", code, stderr)
	}
	var doc jsonTables
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Tables) == 0 {
		t.Fatalf("analyze bottleneck --format json: %v\n%s", err, out)
	}
	tab := doc.Tables[0]
	col := map[string]int{}
	for i, c := range tab.Columns {
		col[c] = i
	}
	for _, c := range []string{"level", "rank", "cause", "explains", "evidence"} {
		if _, ok := col[c]; !ok {
			t.Fatalf("bottleneck table has no %q column: %v", c, tab.Columns)
		}
	}
	byLevel := map[string][]string{}
	for _, r := range tab.Rows {
		lv := fmt.Sprint(r[col["level"]])
		byLevel[lv] = append(byLevel[lv], fmt.Sprint(r[col["cause"]]))
	}
	_, text, _ := runCLI("analyze", dir, "bottleneck")
	return byLevel, text
}

// diagnosisCase is one state of the reference server for the diagnosis to
// name: the server's flags, the sweep, and the level where the cause must
// come first.
type diagnosisCase struct {
	cause, server string
	levels        string
	samples       int
	level         string
}

// The diagnosis names the cause first at the level where it dominates, for
// a real capture of the reference server put into each state. These states
// are CPU work (a decode loop, one decoder for all), so they run one at a
// time.
func TestDiagnosisRealCaptures(t *testing.T) {
	diagnoseRealCaptures(t, false, []diagnosisCase{
		{"admission cap", "--max-running-requests 1", "1,4", 6, "c4"},
		{"host-bound decode", "--max-running-requests 8 --host-step-ms 3", "1,4", 6, "c4"},
	})
}

// The states whose cause is a wait the server sleeps through (a build
// delay, a throttled upload), not CPU work: they run beside the package's
// other idle tests (t.Parallel) without changing what they measure.
func TestDiagnosisRealCapturesIdle(t *testing.T) {
	diagnoseRealCaptures(t, true, []diagnosisCase{
		{"build pool", "--build-workers 1 --build-delay 3 --max-running-requests 8", "1,4", 4, "c4"},
		{"upload", "--upload-kbps 80", "1", 4, "c1"},
		{"overload", "--build-workers 1 --build-max-pending 1 --build-delay 0.5", "6", 6, "c6"},
	})
}

func diagnoseRealCaptures(t *testing.T, idle bool, cases []diagnosisCase) {
	if testing.Short() {
		t.Skip("starts the reference server once per cause")
	}
	refservertest.RequirePocketSphinx(t)
	if idle {
		t.Parallel()
	}
	ds := refservertest.Refset(t)
	script := filepath.Join(refservertest.Root(), "refserver", "refserver.py")
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.cause, " ", "_"), func(t *testing.T) {
			if idle {
				t.Parallel()
			}
			port := fakeasr.FreePort(t)
			out := filepath.Join(t.TempDir(), "b")
			cmd := fmt.Sprintf("%s %s --port %d %s", refservertest.Python, script, port, tc.server)
			code, stdout, stderr := runCLI("capture", "--server-cmd", cmd, "--runs", "1",
				"--target", fmt.Sprintf("http://127.0.0.1:%d", port), "--profile-url", fmt.Sprintf("http://127.0.0.1:%d", port),
				"--dataset", ds, "--max-samples", fmt.Sprint(tc.samples), "--concurrency", tc.levels, "--repeats", "1",
				"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "300ms",
				"--gpu-free-mib", "100000000", "--startup-timeout", "2m", "--timeout", "60s")
			if code != exitOK && code != exitIncomplete {
				t.Fatalf("capture: exit %d\n%s\n%s", code, stdout, stderr)
			}
			got, text := verdicts(t, filepath.Join(out, "run-1"))
			if c := got[tc.level]; len(c) == 0 || c[0] != tc.cause {
				t.Errorf("at %s the verdict is %v, want %q first\n%s", tc.level, c, tc.cause, text)
			}
		})
	}
}

// The H200 fixtures: the GPU-heavy capture is GPU-bound at c=64; the
// study's engine is stalled by its first forwards from c=8 on; the added
// host work per decode step of the host-bound capture is named at c=32
// (where the first forwards still take most of the scheduler's time, so it
// is not first), and not in the study, whose step time stays flat.
func TestDiagnosisH200(t *testing.T) {
	for _, tc := range []struct {
		bundle, level, first, also, never string
	}{
		{"gpu-bound", "c64", "GPU-bound", "", "host-bound decode"},
		{"study", "c32", "first-forward stalls", "", "host-bound decode"},
		{"host-bound", "c32", "first-forward stalls", "host-bound decode", ""},
		// two engines sharing the H200 behind the router: the slowed one
		// (--host-step-ms 2, least-loaded) is named; the even pair is not
		// called imbalanced
		{"router-slow", "c32", "GPU-bound", "slow worker: gpu-w1", ""},
		{"router-even", "c32", "GPU-bound", "", "imbalanced router"},
	} {
		t.Run(tc.bundle, func(t *testing.T) {
			got, text := verdicts(t, bundletest.H200(t, tc.bundle))
			c := got[tc.level]
			if len(c) == 0 || c[0] != tc.first {
				t.Errorf("at %s the verdict is %v, want %q first\n%s", tc.level, c, tc.first, text)
			}
			if tc.also != "" && !slices.Contains(c, tc.also) {
				t.Errorf("at %s the causes %v lack %q\n%s", tc.level, c, tc.also, text)
			}
			if tc.never != "" && slices.Contains(c, tc.never) {
				t.Errorf("at %s the causes %v name %q\n%s", tc.level, c, tc.never, text)
			}
		})
	}
}
