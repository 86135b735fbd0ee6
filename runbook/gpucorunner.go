package runbook

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/bundle"
)

// The GPU co-runner (--gpu-corunner SHARE, docs/CAPACITY.md): a process
// that keeps SHARE of the same GPU's time busy with its own kernels while
// a capture runs, the GPU-side counterpart of the CPU co-runner. The
// script is gpucorunner.py (torch only), embedded here and written next
// to its log when it starts.

//go:embed gpucorunner.py
var gpuCoRunnerScript []byte

// ErrNoTorchCUDA: the co-runner's Python has no torch with CUDA.
var ErrNoTorchCUDA = errors.New("--gpu-corunner needs torch with CUDA")

// GPUCoRunner configures the co-runner of each run (nil: none).
type GPUCoRunner struct {
	Share  float64 // 0 < Share ≤ 1
	Python string  // the interpreter with torch ("": /usr/bin/python3)
}

// GPUCoRunnerScript is the name of the script the co-runner writes into
// its directory; its log is gpu_corunner.log, its report
// bundle.GPUCoRunnerFile.
const (
	GPUCoRunnerScript = "gpu_corunner.py"
	GPUCoRunnerLog    = "gpu_corunner.log"
)

func (g *GPUCoRunner) python() string { return cmp.Or(g.Python, "/usr/bin/python3") }

// Check runs the script's --check: nil where torch sees a CUDA device,
// else ErrNoTorchCUDA with the reason (no torch, torch without CUDA, no
// GPU visible). It writes the script into a temporary directory.
func (g *GPUCoRunner) Check(ctx context.Context) error {
	if !(g.Share > 0 && g.Share <= 1) {
		return fmt.Errorf("%w: --gpu-corunner %g: want a share in (0, 1], e.g. 0.5", ErrBadPlan, g.Share)
	}
	dir, err := os.MkdirTemp("", "asrprof-gpucorunner-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, GPUCoRunnerScript)
	if err := os.WriteFile(script, gpuCoRunnerScript, 0o644); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, g.python(), script, "--check").Output()
	var ans struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	s := strings.TrimSpace(string(out))
	last := strings.TrimSpace(s[strings.LastIndexByte(s, '\n')+1:])
	if jerr := json.Unmarshal([]byte(last), &ans); jerr == nil && ans.Error != "" {
		return fmt.Errorf("%w: %s", ErrNoTorchCUDA, ans.Error)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%w: %s %s --check: %v: %s", ErrNoTorchCUDA, g.python(), script, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return fmt.Errorf("%w: %s: %v", ErrNoTorchCUDA, g.python(), err)
	}
	if !ans.OK {
		return fmt.Errorf("%w: %s --check answered %q", ErrNoTorchCUDA, g.python(), last)
	}
	return nil
}

// RunningGPUCoRunner is a started co-runner.
type RunningGPUCoRunner struct {
	cmd    *exec.Cmd
	report string
	log    *os.File
	done   chan error
}

// Start writes the script into dir and starts it (its output in
// gpu_corunner.log there), and waits up to two minutes for it to have
// calibrated.
func (g *GPUCoRunner) Start(ctx context.Context, dir string) (*RunningGPUCoRunner, error) {
	script := filepath.Join(dir, GPUCoRunnerScript)
	if err := os.WriteFile(script, gpuCoRunnerScript, 0o644); err != nil {
		return nil, fmt.Errorf("--gpu-corunner: %w", err)
	}
	log, err := os.Create(filepath.Join(dir, GPUCoRunnerLog))
	if err != nil {
		return nil, fmt.Errorf("--gpu-corunner: %w", err)
	}
	r := &RunningGPUCoRunner{report: filepath.Join(dir, bundle.GPUCoRunnerFile), log: log, done: make(chan error, 1)}
	r.cmd = exec.Command(g.python(), script, "--share", strconv.FormatFloat(g.Share, 'g', -1, 64), "--json", r.report)
	r.cmd.Stderr = log
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("--gpu-corunner: starting %s: %w", g.python(), err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Bytes()
			log.Write(append(bytes.Clone(line), '\n'))
			if !sent && bytes.Contains(line, []byte(`"ready": true`)) {
				ready <- string(line)
				sent = true
			}
		}
		r.done <- r.cmd.Wait()
	}()
	select {
	case <-ready:
		return r, nil
	case err := <-r.done:
		log.Close()
		return nil, fmt.Errorf("--gpu-corunner: the co-runner exited before it was calibrated (%v); see %s", err, log.Name())
	case <-time.After(2 * time.Minute):
	case <-ctx.Done():
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	log.Close()
	return nil, fmt.Errorf("--gpu-corunner: not calibrated after 2 minutes (or interrupted); see %s", log.Name())
}

// Stop ends the co-runner (SIGTERM, SIGKILL after 30 s) and reads its report.
func (r *RunningGPUCoRunner) Stop() (*bundle.GPUCoRunnerReport, error) {
	defer r.log.Close()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	b, err := os.ReadFile(r.report)
	if err != nil {
		return nil, fmt.Errorf("--gpu-corunner: no report from the co-runner (%v); see %s", err, r.log.Name())
	}
	var rep bundle.GPUCoRunnerReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("--gpu-corunner: %s: %w", r.report, err)
	}
	if rep.BusyMs <= 0 {
		return &rep, fmt.Errorf("--gpu-corunner: the co-runner ran no kernel (%s)", r.report)
	}
	return &rep, nil
}

// WithGPUCoRunner runs fn (a capture into out) with the co-runner beside
// it: checked, started, fn, stopped; its report and log are then copied
// into out (bundle.GPUCoRunnerFile, gpu_corunner.log). A co-runner that
// ran no kernel is an error, joined to fn's.
func WithGPUCoRunner(ctx context.Context, g *GPUCoRunner, out string, fn func() error) (*bundle.GPUCoRunnerReport, error) {
	if err := g.Check(ctx); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "asrprof-gpucorunner-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	r, err := g.Start(ctx, tmp)
	if err != nil {
		return nil, err
	}
	ferr := fn()
	rep, serr := r.Stop()
	for _, name := range []string{bundle.GPUCoRunnerFile, GPUCoRunnerLog} {
		if b, err := os.ReadFile(filepath.Join(tmp, name)); err == nil {
			serr = cmp.Or(serr, os.WriteFile(filepath.Join(out, name), b, 0o644))
		}
	}
	return rep, errors.Join(ferr, serr)
}
