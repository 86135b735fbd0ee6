package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/need"
)

// --gpu-corunner: where torch has no CUDA (this machine: Debian's CPU
// torch, or none) capture and sensitivity stop before anything runs and
// say why; on the GPU host (ASRPROF_DEVICE=1) the co-runner runs beside a
// capture and reports the share it achieved.
func TestGPUCoRunnerCLI(t *testing.T) {
	if !need.OnDevice() {
		// here its time is Python importing torch, three times: CPU that
		// nothing it checks measures (on the device it measures a share)
		t.Parallel()
		cpuHeavy(t)
	}
	port := fakeasr.FreePort(t)
	srv := fakeasr.CommandLine(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK})
	ds := dataset(t, 2)
	if need.OnDevice() {
		out := filepath.Join(t.TempDir(), "gc")
		py := os.Getenv("ASRPROF_GPU_PYTHON") // the Python with CUDA torch there, if not /usr/bin/python3
		if py == "" {
			py = "/usr/bin/python3"
		}
		code, stdout, stderr := runCLI(append([]string{"capture", "--server-cmd", srv, "--runs", "1", "--dataset", ds, "--gpu-corunner", "0.5",
			"--gpu-corunner-python", py}, runbookArgs(port, out)...)...)
		if code != exitOK {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		var rep bundle.GPUCoRunnerReport
		b, err := os.ReadFile(filepath.Join(out, "run-1", bundle.GPUCoRunnerFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		t.Logf("co-runner beside the capture: %+v", rep)
		if rep.AchievedShare < 0.4 || rep.AchievedShare > 0.6 || rep.Matmuls == 0 {
			t.Errorf("achieved %+v", rep)
		}
		return
	}
	for _, args := range [][]string{
		append([]string{"capture", "--dataset", ds, "--gpu-corunner", "0.5"}, runbookArgs(port, filepath.Join(t.TempDir(), "c"))...),
		append([]string{"capture", "--server-cmd", srv, "--runs", "1", "--dataset", ds, "--gpu-corunner", "50%"}, runbookArgs(port, filepath.Join(t.TempDir(), "r"))...),
		append([]string{"sensitivity", "--server-cmd", srv, "--dataset", ds, "--gpu-corunner", "0.3", "--cycles", "1"}, runbookArgs(port, filepath.Join(t.TempDir(), "s"))...),
	} {
		code, stdout, stderr := runCLI(args...)
		if code != exitFailed || !strings.Contains(stderr, "--gpu-corunner needs torch with CUDA: ") {
			t.Errorf("%s: exit %d, want %d (if torch with CUDA is here, run with %s=1)\n%s\n%s", args[0], code, exitFailed, need.DeviceEnv, stdout, stderr)
		}
		if strings.Contains(stderr, "server pid") || strings.Contains(stdout+stderr, "req/s") {
			t.Errorf("%s: something ran before the check:\n%s", args[0], stderr)
		}
	}
	// asrprof serve's API takes capture's flags but runs no co-runner: refused.
	if _, err := parseAPICapture([]string{"--target", "http://127.0.0.1:1", "--dataset", ds, "--gpu-corunner", "0.5"}); err == nil ||
		!strings.Contains(err.Error(), "--gpu-corunner is not taken over the API") {
		t.Errorf("API capture with --gpu-corunner: %v", err)
	}
	for _, bad := range []string{"2", "0", "half"} {
		code, _, stderr := runCLI(append([]string{"capture", "--dataset", ds, "--gpu-corunner", bad}, runbookArgs(port, filepath.Join(t.TempDir(), "b"))...)...)
		if code != exitUsage || !strings.Contains(stderr, `--gpu-corunner "`+bad+`": want a share`) {
			t.Errorf("--gpu-corunner %s: exit %d\n%s", bad, code, stderr)
		}
	}
}
