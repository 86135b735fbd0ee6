package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"github.com/asrprof/asrprof/option"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/runbook"
)

// runbookUsage is the part of `capture --help` about server lifecycle and
// repeated runs.
const runbookUsage = `Server lifecycle and repeated runs (docs/RUNBOOK.md):
With --server-cmd (or --server-cmd-file) asrprof starts the server itself, in
its own process group, with its output in server.log; waits for --health-url;
gives its pid to the probes; runs the capture; then stops the whole group
(SIGTERM, SIGKILL after --stop-grace) and, where NVML works, waits until every
GPU uses less than --gpu-free-mib. It refuses to start when the target's port
already answers, unless --reuse-server. The command is split like a shell
splits a simple command (quotes and backslashes, no $VAR or pipes); for shell
syntax write it as: sh -c '...'.

--runs warm,1,2,3 (the default with --server-cmd) does one full sweep per
run, each with a fresh server and its own sub-bundle under --out (run-warm/,
run-1/, ...). The warm run is recorded, never scored. Over the scored runs
asrprof prints mean, sample standard deviation, min and max per level and
metric and writes runbook.json at the top of --out. The verdict is complete
only if every scored run has evaluated == total, skipped == 0 and failed == 0
at every level; otherwise it lists the missing coverage (run, level, what)
instead of the means (exit 3).
`

// runbookFlags are the runbook's settings of a command (capture, ab,
// sensitivity, what-if: runbook.Options) and what the command works out
// from its flags.
type runbookFlags struct {
	cmd string
	runbook.Settings

	// What a capture prints before it starts (captureCommand): the levels
	// it runs and why (levelsLine), and warnings about them.
	levels   string
	warnings []string
	set      map[string]bool // the flags given

	// lengths is --length-buckets: the end-of-capture tables' and
	// report's results by audio length (finisher).
	lengths analysis.LengthBuckets
}

// addRunbookFlags defines the command's runbook options (runbook.Options)
// on fs; opts are they.
func addRunbookFlags(fs *flag.FlagSet) (f *runbookFlags, opts []option.Option) {
	f = &runbookFlags{cmd: fs.Name(), Settings: runbook.DefaultSettings()}
	opts = runbook.Options(f.cmd)
	option.DefineAll(fs, opts, &f.Settings, nil)
	return f, opts
}

// help returns the command's help text before its flags and after them.
func (f *runbookFlags) help() (head, tail string) {
	switch f.cmd {
	case "ab":
		return abUsage, ""
	case "sensitivity":
		return sensitivityUsage, ""
	}
	return captureUsage, strings.TrimPrefix(proxyUsage, "\n") + "\n" + runbookUsage
}

// enabled reports whether the command is a runbook rather than one capture.
func (f *runbookFlags) enabled() bool {
	return f.cmd == "ab" || f.ServerCmd != "" || f.ServerCmdFile != "" || f.Runs != ""
}

// serverCmd returns the command given inline or in a file.
func serverCommand(name, inline, file string) (runbook.ServerCmd, error) {
	switch {
	case inline != "" && file != "":
		return runbook.ServerCmd{}, fmt.Errorf("%w: give --%s or --%s-file, not both", errUsage, name, name)
	case file != "":
		text, argv, err := runbook.ReadCommandFile(file)
		if err != nil {
			return runbook.ServerCmd{}, fmt.Errorf("%w: --%s-file: %v", errUsage, name, err)
		}
		return runbook.ServerCmd{Command: text, Argv: argv}, nil
	case inline != "":
		argv, err := runbook.SplitCommand(inline)
		if err != nil {
			return runbook.ServerCmd{}, fmt.Errorf("%w: --%s: %v", errUsage, name, err)
		}
		return runbook.ServerCmd{Command: inline, Argv: argv}, nil
	}
	return runbook.ServerCmd{}, nil
}

// config is the runbook configuration of the lifecycle flags, without a plan.
func (f *runbookFlags) config(cfg capture.Config) runbook.Config {
	rc := runbook.Config{
		Capture:   cfg,
		Lifecycle: f.Lifecycle,
		CacheDirs: f.CacheDirs,
		Finish:    finisher(f.lengths),
	}
	rc.GPUCoRunner, _ = f.gpuCoRunnerConfig()
	if len(f.ProvenanceEnv) > 0 {
		rc.ProvenanceEnv = append(slices.Clone(runbook.DefaultProvenanceEnv), f.ProvenanceEnv...)
	}
	return rc
}

// run makes the runs of --runs or the A/B flags with the capture
// config, and runs them.
func (f *runbookFlags) run(ctx context.Context, cfg capture.Config, stdout, stderr io.Writer) error {
	if cfg.PID != 0 && !f.Lifecycle.Reuse {
		return fmt.Errorf("%w: --pid is set from the started server; give it only with --reuse-server", errUsage)
	}
	rc := f.config(cfg)
	if f.cmd == "ab" {
		a, err := serverCommand("a-cmd", f.ACmd, f.ACmdFile)
		if err != nil {
			return err
		}
		b, err := serverCommand("b-cmd", f.BCmd, f.BCmdFile)
		if err != nil {
			return err
		}
		if len(a.Argv) == 0 || len(b.Argv) == 0 {
			return fmt.Errorf("%w: asrprof ab needs --a-cmd and --b-cmd (or their -file forms)", errUsage)
		}
		if rc.Plan, err = runbook.ABPlan(f.Order, !f.NoWarm, a, b); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	} else {
		srv, err := serverCommand("server-cmd", f.ServerCmd, f.ServerCmdFile)
		if err != nil {
			return err
		}
		if len(srv.Argv) == 0 && !f.Lifecycle.Reuse {
			return fmt.Errorf("%w: --runs needs --server-cmd (a fresh server per run), or --reuse-server to measure a running one", errUsage)
		}
		if rc.Plan, err = runbook.ParseRuns(cmp.Or(f.Runs, runbook.DefaultRuns), srv); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	_, err := runbook.Run(ctx, rc, stdout, stderr)
	return err
}

// gpuCoRunnerConfig is --gpu-corunner's co-runner (nil without it).
func (f *runbookFlags) gpuCoRunnerConfig() (*runbook.GPUCoRunner, error) {
	if f.GPUCoRunner == "" {
		return nil, nil
	}
	share, err := strconv.ParseFloat(strings.TrimSuffix(f.GPUCoRunner, "%"), 64)
	if err == nil && strings.HasSuffix(f.GPUCoRunner, "%") {
		share /= 100
	}
	if err != nil || !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("%w: --gpu-corunner %q: want a share of the GPU's time in (0, 1], e.g. 0.5 or 50%%", errUsage, f.GPUCoRunner)
	}
	return &runbook.GPUCoRunner{Share: share, Python: f.GPUCoRunnerPython}, nil
}
