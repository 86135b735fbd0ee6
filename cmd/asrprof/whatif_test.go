package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/refserver/refservertest"
	"github.com/asrprof/asrprof/runbook"
)

// whatIfFake is the fake server of the what-if tests: every request
// sleeps 100 ms, at most maxRunning at once (--max-running-requests).
func whatIfFake(port, maxRunning int) string {
	return fakeasr.CommandLine(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK, Delay: 100 * time.Millisecond, MaxRunning: maxRunning})
}

// whatIfBundle records the bundle whose advice the tests act on: the
// fake server with one slot, c4, 16 samples, one repeat (through asrprof
// capture --server-cmd --runs 1: the bundle is run-1/).
func whatIfBundle(t *testing.T, port int, server string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "before")
	args := append([]string{"capture", "--server-cmd", server, "--runs", "1", "--dataset", dataset(t, 16)}, runbookArgs(port, out)...)
	args = append(args, "--concurrency", "4")
	if code, stdout, stderr := runCLI(args...); code != exitOK {
		t.Fatalf("capture: exit %d\n%s\n%s", code, stdout, stderr)
	}
	return filepath.Join(out, "run-1")
}

// whatIfArgs are the lifecycle flags of the tests' what-if runs, and
// --order ABA (the least that measures the A/A spread; the default is
// ABBAAB); the capture's own flags come from the bundle's manifest.
func whatIfArgs(out string, extra ...string) []string {
	return append([]string{"--out", out, "--order", "ABA", "--gpu-free-mib", "100000000", "--startup-timeout", "20s"}, extra...)
}

func readWhatIf(t *testing.T, out string) bundle.WhatIfReport {
	t.Helper()
	var rep bundle.WhatIfReport
	b, err := os.ReadFile(filepath.Join(out, bundle.WhatIfFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func testdataPath(name string) string {
	p, _ := filepath.Abs(filepath.Join("testdata", name))
	return p
}

// what-if acts on a hand-written advice (max_running 1 → 2 doubles
// req/s): it raises --max-running-requests from 1 to 2 in the command,
// reruns the bundle's capture with the server as it was (A) and as
// changed (B), and prints the prediction beside both.
func TestWhatIfRaisesMaxRunning(t *testing.T) {
	t.Parallel() // the fake server sleeps its 100 ms: the ratio B/A holds beside other tests
	port := fakeasr.FreePort(t)
	srv := whatIfFake(port, 1)
	dir := whatIfBundle(t, port, srv)
	out := filepath.Join(t.TempDir(), "wi")
	code, stdout, stderr := runCLI(append([]string{"what-if", dir, "--server-cmd", srv, "--advice", testdataPath("whatif_advice.star")}, whatIfArgs(out)...)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"What-if", "admission-bound", "raise max_running from 1 to 2 (--max-running-requests 1 → 2)", "req/s", "yes", "Mann-Whitney"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// A few lines on stderr: the round, its result, where whatif.json is.
	if n := strings.Count(strings.TrimSpace(stderr), "\n") + 1; n > 4 || !strings.Contains(stderr, "whatif.log") || !strings.Contains(stderr, "before") {
		t.Errorf("stderr (%d lines):\n%s", n, stderr)
	}
	rep := readWhatIf(t, out)
	if len(rep.Rounds) != 1 || rep.Level != "c4" {
		t.Fatalf("rounds %d, level %q", len(rep.Rounds), rep.Level)
	}
	r := rep.Rounds[0]
	if r.Edit.Old != "1" || r.Edit.New != "2" || r.Edit.Where != "replaced" || !strings.Contains(r.CommandB, "--max-running-requests 2") || r.CommandA != srv {
		t.Errorf("edit %+v\nA %s\nB %s", r.Edit, r.CommandA, r.CommandB)
	}
	if r.Before == nil || r.After == nil || r.Inside == nil || r.ErrorPct == nil || !r.Complete {
		t.Fatalf("round not measured: %+v", r)
	}
	// 100 ms a request, 4 in flight: 1 slot gives about 10 req/s, 2 give 20.
	// Measured here (2 shared cores, load 1 to 2.7), 5 runs: B/A 1.996-2.001,
	// before 9.89-9.91 req/s; the bounds leave room for a busier machine.
	t.Logf("before %.2f, after %.2f req/s: B/A %.3f", *r.Before, *r.After, *r.After / *r.Before)
	if ratio := *r.After / *r.Before; ratio < 1.6 || ratio > 2.4 || !*r.Inside {
		t.Errorf("before %.2f, after %.2f req/s (B/A %.2f), inside %v", *r.Before, *r.After, ratio, *r.Inside)
	}
	// The default order, A, B, A: judged on the ratio within the
	// experiment, 2× [1.5–2.5] predicted (the script's), the A/A spread
	// measured (the fake's two A runs, a few % apart at most).
	j := r.Judgement
	if len(r.BeforeN) != 2 || len(r.AfterN) != 1 || j == nil || j.AASpread == nil || *j.AASpread > 0.25 ||
		j.PredictedRatio != 2 || j.MeasuredRatio < 1.6 || j.MeasuredRatio > 2.4 || !j.Inside {
		t.Errorf("runs A %v B %v, judgement %+v", r.BeforeN, r.AfterN, j)
	}
	if !strings.Contains(stdout, "judged on the ratio B/A within this experiment (2 A and 1 B runs, interleaved)") {
		t.Errorf("stdout lacks the judgement's note:\n%s", stdout)
	}
	// B's server ran the changed command (its recorded provenance).
	var rec runbook.RunRecord
	b, err := os.ReadFile(filepath.Join(out, "round-1", "B-1", runbook.RunFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Provenance == nil || !strings.Contains(rec.Provenance.Command, "--max-running-requests 2") {
		t.Errorf("B-1's server: %+v", rec.Provenance)
	}
	// The rerun is the bundle's capture: its level and repeats.
	if conc := fmt.Sprint(rep.Capture["concurrency"]); conc != "[4]" || fmt.Sprint(rep.Capture["repeats"]) != "1" {
		t.Errorf("capture %v", rep.Capture)
	}
}

// --rounds: each round acts on the advice of the last round's B bundle,
// until the verdict has no knob: 1 → 2, 2 → 4, then none.
func TestWhatIfRounds(t *testing.T) {
	t.Parallel() // the fake server sleeps its 100 ms: the ratio B/A holds beside other tests
	port := fakeasr.FreePort(t)
	srv := whatIfFake(port, 1)
	dir := whatIfBundle(t, port, srv)
	out := filepath.Join(t.TempDir(), "wi")
	code, stdout, stderr := runCLI(append([]string{"what-if", dir, "--server-cmd", srv, "--rounds", "5", "--order", "AB",
		"--advice", testdataPath("whatif_rounds.star")}, whatIfArgs(out)...)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	rep := readWhatIf(t, out)
	var edits []string
	for _, r := range rep.Rounds {
		edits = append(edits, r.Edit.Old+"→"+r.Edit.New)
	}
	if strings.Join(edits, " ") != "1→2 2→4" || !strings.Contains(rep.Stopped, "suggests no knob") {
		t.Fatalf("edits %v, stopped %q\n%s", edits, rep.Stopped, stdout)
	}
	if rep.Rounds[1].From != filepath.Join(out, "round-1", "B-1") || rep.Rounds[1].CommandA != rep.Rounds[0].CommandB {
		t.Errorf("round 2 from %s, A %s", rep.Rounds[1].From, rep.Rounds[1].CommandA)
	}
	if !strings.Contains(stdout, "stopped: round 3") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

// A round whose change made the metric worse ends the rounds: the next
// would start from the loss. The advice (wrong on purpose) halves the
// fake server's 2 slots and predicts twice the req/s; with --rounds 3 the
// rounds stop after round 1, which measured about half.
func TestWhatIfStopsWhereWorse(t *testing.T) {
	t.Parallel() // the fake server sleeps its 100 ms: the ratio B/A holds beside other tests
	port := fakeasr.FreePort(t)
	srv := whatIfFake(port, 2)
	dir := whatIfBundle(t, port, srv)
	out := filepath.Join(t.TempDir(), "wi")
	code, stdout, stderr := runCLI(append([]string{"what-if", dir, "--server-cmd", srv, "--rounds", "3",
		"--advice", testdataPath("whatif_worse.star")}, whatIfArgs(out)...)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	rep := readWhatIf(t, out)
	if len(rep.Rounds) != 1 || rep.Rounds[0].Edit.Old != "2" || rep.Rounds[0].Edit.New != "1" {
		t.Fatalf("rounds %+v, stopped %q\n%s", rep.Rounds, rep.Stopped, stdout)
	}
	r := rep.Rounds[0]
	if r.Before == nil || r.After == nil || *r.After >= *r.Before*0.8 {
		t.Fatalf("round 1 not measured as a loss: before %v, after %v", r.Before, r.After)
	}
	// The fake's known effect, half the slots, half the req/s, against the
	// script's 2×: outside the interval, even widened to the A/A spread.
	if j := r.Judgement; j == nil || j.AASpread == nil || j.Inside || j.MeasuredRatio < 0.35 || j.MeasuredRatio > 0.65 || j.JudgedLo <= j.MeasuredRatio {
		t.Errorf("judgement %+v: want about 0.5, outside", j)
	}
	if !strings.HasPrefix(rep.Stopped, "round 1: the change made req/s worse") || !strings.Contains(stdout, "stopped: round 1: the change made req/s worse") {
		t.Errorf("stopped %q\n%s", rep.Stopped, stdout)
	}
}

// --dry-run prints round 1's runs: the reference server's flag is built
// in, appended where the command lacks it; nothing runs.
func TestWhatIfDryRun(t *testing.T) {
	t.Parallel() // measures nothing: its capture only makes the bundle
	port := fakeasr.FreePort(t)
	dir := whatIfBundle(t, port, whatIfFake(port, 1))
	out := filepath.Join(t.TempDir(), "wi")
	ref := fmt.Sprintf("/usr/bin/python3 %s --port %d", filepath.Join(refservertest.Root(), "refserver", "refserver.py"), port)
	code, stdout, stderr := runCLI(append([]string{"what-if", dir, "--server-cmd", ref, "--dry-run", "--level", "c4", "--rounds", "2",
		"--advice", testdataPath("whatif_advice.star")}, whatIfArgs(out)...)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"--max-running-requests (not in the command) → 2 (appended)", "A-1: " + ref + "\n",
		"B-1: " + ref + " --max-running-requests 2\n", "1 repeats", "rounds 2 to 2"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a dry run made %s", out)
	}
}

// Errors are named and exit 2 before any server starts.
func TestWhatIfErrors(t *testing.T) {
	t.Parallel() // measures nothing: its capture only makes the bundle
	port := fakeasr.FreePort(t)
	srv := whatIfFake(port, 1)
	dir := whatIfBundle(t, port, srv)
	tmp := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	advice := func(knob, metric string) string {
		return fmt.Sprintf(`load("table", "table")
t = table.new("advice", [("level", "str"), ("cause", "str"), ("knob", "str"), ("from", "float"), ("to", "float"),
    ("change", "str"), ("metric", "str"), ("now", "float"), ("predicted", "float"), ("lo", "float"), ("hi", "float"), ("basis", "str")])
t.add_row("c4", "x", %q, 1.0, 2.0, "", %q, 10.0, 20.0, 15.0, 25.0, "")
emit(t)
`, knob, metric)
	}
	// The fake without --max-running-requests in its command: no mapping.
	noFlag := fakeasr.CommandLine(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK})
	for _, tc := range []struct {
		name string
		args []string
		msg  []string
	}{
		// the capture has no telemetry: its diagnosis is seen from outside,
		// whose advice names no server knob
		{"no knob in the advice", []string{"--server-cmd", srv}, []string{"suggests no knob at any level", "--advice"}},
		{"no advice table from a script", []string{"--server-cmd", srv, "--advice", "sweep"}, []string{"the analysis sweep emitted no table named advice (its tables: sweep)"}},
		{"unknown knob in the advice", []string{"--server-cmd", srv, "--advice", script("turbo.star", advice("turbo", "requests_per_s"))},
			[]string{`row 1 (c4), column knob: unknown knob "turbo"`}},
		{"unknown metric in the advice", []string{"--server-cmd", srv, "--advice", script("metric.star", advice("max_running", "joy"))},
			[]string{`column metric: "joy"`}},
		{"unknown --knob", []string{"--server-cmd", srv, "--knob", "turbo=--turbo"}, []string{`--knob "turbo=--turbo": unknown knob "turbo"`}},
		{"malformed --knob", []string{"--server-cmd", srv, "--knob", "max_running"}, []string{"want NAME=FLAG"}},
		{"flag not in command, no mapping", []string{"--server-cmd", noFlag, "--advice", testdataPath("whatif_advice.star")},
			[]string{"has no --max-running-requests and does not run refserver/refserver.py", "--knob max_running="}},
		{"no server command", []string{"--advice", testdataPath("whatif_advice.star")}, []string{"what-if needs --server-cmd"}},
		{"level without advice", []string{"--server-cmd", srv, "--level", "c9", "--advice", testdataPath("whatif_advice.star")},
			[]string{"--level c9: the advice has no row for it (its levels: c4)"}},
		{"no bundle", []string{"--server-cmd", srv, "--advice", testdataPath("whatif_advice.star"), filepath.Join(tmp, "nothing")}, []string{"no such directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "wi")
			target := dir
			if tc.name == "no bundle" {
				target = tc.args[len(tc.args)-1]
				tc.args = tc.args[:len(tc.args)-1]
			}
			code, stdout, stderr := runCLI(append(append([]string{"what-if", target}, tc.args...), whatIfArgs(out)...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d\n%s\n%s", code, exitUsage, stdout, stderr)
			}
			for _, m := range tc.msg {
				if !strings.Contains(stderr, m) {
					t.Errorf("stderr lacks %q:\n%s", m, stderr)
				}
			}
			if _, err := os.Stat(filepath.Join(out, "round-1")); err == nil {
				t.Error("a run started")
			}
		})
	}
	// With the user's flag for the knob, the same command works (dry run).
	code, stdout, stderr := runCLI(append([]string{"what-if", dir, "--server-cmd", noFlag, "--knob", "max_running=-max-running-requests", "--dry-run",
		"--advice", testdataPath("whatif_advice.star")}, whatIfArgs(filepath.Join(tmp, "wi"))...)...)
	if code != exitOK || !strings.Contains(stdout, noFlag+" -max-running-requests 2\n") {
		t.Errorf("--knob: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func TestWhatIfHelp(t *testing.T) {
	h := helpOf(t, "what-if")
	for _, want := range []string{"Usage: asrprof what-if BUNDLE", "--server-cmd", "--level", "--knob", "--rounds", "--dry-run", "--advice",
		"max_running    --max-running-requests", "host_work      --host-step-ms", "whatif.json", "predicted [lo–hi]"} {
		if !strings.Contains(h, want) {
			t.Errorf("what-if --help lacks %q", want)
		}
	}
	for _, not := range []string{"--runs", "--reuse-server"} {
		if strings.Contains(h, not+" ") || strings.Contains(h, not+"\n") {
			t.Errorf("what-if --help offers %s", not)
		}
	}
}

// A bundle keeps no headers, so what-if takes --header for its reruns: a
// server started with --api-key answers them. No file of the capture or
// the what-if holds the key: not the manifests, not runbook.json's
// provenance (the server's command line and environment), not whatif.json,
// the progress logs, or server.log, where the fake server prints its
// arguments as vLLM does.
func TestWhatIfHeader(t *testing.T) {
	t.Parallel() // the fake server sleeps; the verdict is not checked
	const key = "sk-whatif-9d2"
	port := fakeasr.FreePort(t)
	// the key on the command line and in the environment (VLLM_* is in the
	// provenance's list of variables)
	server := "env VLLM_API_KEY=" + key + " " + fakeasr.CommandLine(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK, Delay: 100 * time.Millisecond, MaxRunning: 1, APIKey: key})
	out := filepath.Join(t.TempDir(), "before")
	args := append([]string{"capture", "--server-cmd", server, "--runs", "1", "--dataset", dataset(t, 8), "--header", "Authorization: Bearer " + key},
		runbookArgs(port, out)...)
	if code, stdout, stderr := runCLI(append(args, "--concurrency", "4")...); code != exitOK {
		t.Fatalf("capture: exit %d\n%s\n%s", code, stdout, stderr)
	}
	wi := filepath.Join(t.TempDir(), "wi")
	code, stdout, stderr := runCLI(append([]string{"what-if", filepath.Join(out, "run-1"), "--server-cmd", server, "--level", "c4",
		"--advice", testdataPath("whatif_advice.star"), "--header", "Authorization: Bearer " + key}, whatIfArgs(wi)...)...)
	if code != exitOK {
		t.Fatalf("what-if with the key: exit %d\n%s\n%s", code, stdout, stderr)
	}
	r := readWhatIf(t, wi).Rounds[0]
	if !r.Complete || len(r.BeforeN) != 2 || len(r.AfterN) != 1 || slices.Min(append(r.BeforeN, r.AfterN...)) <= 0 {
		t.Errorf("round %+v: want ABA complete, every run measured", r)
	}
	noFileHolds(t, out, key)
	noFileHolds(t, wi, key)
	var rb struct {
		Runs []struct {
			Provenance runbook.Provenance `json:"provenance"`
		} `json:"runs"`
	}
	readJSONInto(t, filepath.Join(out, runbook.File), &rb)
	if p := rb.Runs[0].Provenance; p.Env["VLLM_API_KEY"] != secret.Hidden || !slices.Contains(p.Argv, "--api-key") {
		t.Errorf("provenance %+v: want the variable and the flag named, their values hidden", p)
	}
}
