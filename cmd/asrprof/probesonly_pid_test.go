package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/need"
)

// TestProbesOnlyDeadPID: `asrprof capture --probes-only --pid N` for a
// process that does not exist stops at once with a clear error (exit 2)
// instead of watching nothing until --duration ends (docs/SCALE.md's
// `--pid 1234` example typed on a host without that process).
func TestProbesOnlyDeadPID(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(cmd.Process.Pid) // reaped: no such process (unless reused at once)
	out := filepath.Join(t.TempDir(), "p")
	code, _, stderr := runCLI("capture", "--probes-only", "--pid", dead, "--probes", "sched", "--duration", "10m", "--out", out)
	if code != exitUsage || !strings.Contains(stderr, "--pid "+dead+": no such process") {
		t.Errorf("dead --pid: exit %d, want %d with the pid named: %s", code, exitUsage, stderr)
	}
}

// TestProbesOnlyIdleServer: `asrprof capture --probes-only --pid N --probes
// cpu` on a process that does not run (a server with no load) ends
// complete, with a note that the cpu probe had nothing to sample, not the
// ERROR of a probe that is on and broken (capture's
// TestActivityProbeEmptyOnIdleTarget has the busy case).
func TestProbesOnlyIdleServer(t *testing.T) {
	need.Root(t, "for the cpu probe")
	idle := exec.Command("sleep", "60")
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { idle.Process.Kill(); idle.Wait() }()
	out := filepath.Join(t.TempDir(), "p")
	code, _, stderr := runCLI("capture", "--probes-only", "--pid", strconv.Itoa(idle.Process.Pid), "--probes", "cpu",
		"--duration", "2s", "--out", out)
	if strings.Contains(stderr, "probe cpu: off") || strings.Contains(stderr, "probe cpu: failed") {
		t.Fatalf("the cpu probe did not start here:\n%s", stderr)
	}
	if code != exitOK || strings.Contains(stderr, "ERROR") ||
		!strings.Contains(stderr, "probe cpu recorded nothing in 1 of 1 scored passes") || !strings.Contains(stderr, "an idle server, not a failure") {
		t.Errorf("exit %d, want %d with the idle note and no ERROR:\n%s", code, exitOK, stderr)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Manifest.Complete || b.Manifest.Extra["probe_idle"] == nil {
		t.Errorf("manifest complete %v, probe_idle %v", b.Manifest.Complete, b.Manifest.Extra["probe_idle"])
	}
	if html, err := os.ReadFile(filepath.Join(out, "report.html")); err != nil || !strings.Contains(string(html), "nothing to record, the server idle") {
		t.Errorf("report.html does not say the cpu probe had nothing to record (%v)", err)
	}
}

// TestProbesOnlySlowSampler: at `--cpu-hz 1` a target that works in short
// bursts, under a CPU second in the period, would often leave a working
// cpu probe no sample (e^-0.5 of the time at half a second): that is the
// idle note, whose cut follows the rate (ln(1000) samples' worth, 6.908 s at
// 1 Hz), never the ERROR of a broken probe (which a fixed 30 ms cut gave).
func TestProbesOnlySlowSampler(t *testing.T) {
	need.Root(t, "for the cpu probe")
	bursts := exec.Command("sh", "-c", `while :; do i=0; while [ $i -lt 10000 ]; do i=$((i+1)); done; sleep 0.05; done`)
	if err := bursts.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { bursts.Process.Kill(); bursts.Wait() }()
	out := filepath.Join(t.TempDir(), "p")
	code, _, stderr := runCLI("capture", "--probes-only", "--pid", strconv.Itoa(bursts.Process.Pid), "--probes", "cpu",
		"--cpu-hz", "1", "--duration", "2s", "--out", out)
	if strings.Contains(stderr, "probe cpu: off") || strings.Contains(stderr, "probe cpu: failed") {
		t.Fatalf("the cpu probe did not start here:\n%s", stderr)
	}
	if code != exitOK || strings.Contains(stderr, "ERROR") {
		t.Fatalf("exit %d, want %d and no ERROR:\n%s", code, exitOK, stderr)
	}
	if strings.Contains(stderr, "probe cpu recorded nothing") && !strings.Contains(stderr, "used under 6908 ms of CPU in each") {
		t.Errorf("the idle note does not give the cut of 1 Hz:\n%s", stderr)
	}
	t.Logf("%s", stderr)
}
