package main

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
