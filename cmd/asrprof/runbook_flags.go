package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

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

// runbookFlags are the capture flags that turn one capture into a runbook
// of runs with a server lifecycle, and (for `asrprof ab`) the A/B flags.
type runbookFlags struct {
	ab bool

	serverCmd, serverCmdFile string
	runs                     string
	healthURL                string
	startupTimeout           time.Duration
	stopGrace                time.Duration
	gpuFreeMiB               uint64
	gpuFreeTimeout           time.Duration
	reuse                    bool
	provenanceEnv            string
	cacheDirs                capture.Repeated

	aCmd, bCmd, aCmdFile, bCmdFile string
	order                          string
	noWarm                         bool

	sens *sensitivityFlags // asrprof sensitivity only

	// --gpu-corunner (capture and sensitivity): the share, its Python.
	gpuCoRunner, gpuCoRunnerPython string

	// What a capture prints before it starts (captureCommand): the levels
	// it runs and why (levelsLine), and warnings about them.
	levels   string
	warnings []string

	// lengths is --length-buckets: the end-of-capture tables' and
	// report's results by audio length (finisher).
	lengths analysis.LengthBuckets
}

// The help groups of ab's and sensitivity's own flags; parseCapture puts
// them first.
const (
	abGroup          = "A/B runs"
	sensitivityGroup = "Sensitivity (docs/RUNBOOK.md)"
	lifecycleGroup   = "Server lifecycle and runs (docs/RUNBOOK.md)"
	whatIfGroup      = "What-if (docs/CAPACITY.md)"
	gpuCoRunnerGroup = "GPU co-runner (docs/CAPACITY.md)"
)

// addRunbookFlags registers the lifecycle and run flags in their help
// groups, and the A/B flags when the flag set is the `ab` command's.
func addRunbookFlags(g *flagGroups) *runbookFlags {
	fs := g.fs
	f := &runbookFlags{ab: fs.Name() == "ab"}
	if f.ab {
		g.add(abGroup,
			func() { fs.StringVar(&f.aCmd, "a-cmd", "", "server `COMMAND` of side A (split like --server-cmd)") },
			func() { fs.StringVar(&f.bCmd, "b-cmd", "", "server `COMMAND` of side B") },
			func() { fs.StringVar(&f.aCmdFile, "a-cmd-file", "", "read side A's server command from `FILE`") },
			func() { fs.StringVar(&f.bCmdFile, "b-cmd-file", "", "read side B's server command from `FILE`") },
			func() {
				fs.StringVar(&f.order, "order", "ABBAAB", "the scored runs in order, letters A and B (`ORDER`); sub-bundles A-1, B-1, B-2, A-2, ...")
			},
			func() {
				fs.BoolVar(&f.noWarm, "no-warm", false, "skip the unscored warm run of each side (A-warm, B-warm) before the scored runs")
			},
		)
	} else {
		title := lifecycleGroup
		switch fs.Name() {
		case "sensitivity":
			title = sensitivityGroup
		case "what-if":
			title = whatIfGroup
		}
		g.add(title,
			func() {
				fs.StringVar(&f.serverCmd, "server-cmd", "", "start the server with `COMMAND` for each run (own process group, log in server.log);\nsplit like a shell's simple command, e.g. \"python3 serve.py --port 8000\"")
			},
			func() {
				fs.StringVar(&f.serverCmdFile, "server-cmd-file", "", "read the server command from `FILE` (# comment lines, backslash-newline continues)")
			},
			func() {
				if fs.Name() == "what-if" {
					return // what-if plans its own runs (--order)
				}
				fs.StringVar(&f.runs, "runs", "", "runs to do, each with a fresh server and its own sub-bundle run-NAME/ (`LIST`);\nwarm is recorded, never scored (default with --server-cmd: "+runbook.DefaultRuns+")")
			},
		)
	}
	if fs.Name() == "sensitivity" {
		g.add(sensitivityGroup, func() { f.sens = addSensitivityFlags(fs) })
	}
	if fs.Name() == "capture" || fs.Name() == "sensitivity" {
		g.add(gpuCoRunnerGroup,
			func() {
				fs.StringVar(&f.gpuCoRunner, "gpu-corunner", "", "keep `SHARE` (0..1, e.g. 0.5 or 50%) of the GPU's time busy with a co-runner's own matmuls while each\ncapture runs (time-slicing with the server); its achieved share, measured with CUDA events,\ngoes to gpu_corunner.json in the bundle. Needs torch with CUDA (docs/CAPACITY.md)")
			},
			func() {
				fs.StringVar(&f.gpuCoRunnerPython, "gpu-corunner-python", "/usr/bin/python3", "the Python (`PATH`) with torch that runs the GPU co-runner")
			},
		)
	}
	g.add(lifecycleGroup,
		func() {
			fs.StringVar(&f.healthURL, "health-url", "", "`URL` that answers 200 once the server is ready (default: --target + /health)")
		},
		func() {
			fs.DurationVar(&f.startupTimeout, "startup-timeout", 30*time.Minute, "how long a started server may take to become healthy (`DURATION`)")
		},
		func() {
			fs.DurationVar(&f.stopGrace, "stop-grace", 10*time.Second, "after SIGTERM to the server's process group, wait this long before SIGKILL (`DURATION`)")
		},
		func() {
			fs.Uint64Var(&f.gpuFreeMiB, "gpu-free-mib", 1024, "after a stop, wait until every GPU uses less than `MIB` of memory (where NVML works)")
		},
		func() {
			fs.DurationVar(&f.gpuFreeTimeout, "gpu-free-timeout", 2*time.Minute, "give up waiting for GPU memory after `DURATION` (an error)")
		},
		func() {
			if fs.Name() == "what-if" {
				return // what-if starts the server as it is and as changed
			}
			fs.BoolVar(&f.reuse, "reuse-server", false, "when the target's port already answers, measure that server as it is instead of refusing")
		},
		func() {
			fs.StringVar(&f.provenanceEnv, "provenance-env", "", "more environment variable names to record with each run, comma-separated `LIST` (NAME* for a prefix);\nalways recorded: "+strings.Join(runbook.DefaultProvenanceEnv, ","))
		},
		func() {
			fs.Var(&f.cacheDirs, "cache-dir", "a compile cache `DIR` whose size and newest modification time are recorded before each run (repeatable)")
		},
	)
	return f
}

// help returns the command's help text before its flags and after them.
func (f *runbookFlags) help() (head, tail string) {
	if f.ab {
		return abUsage, ""
	}
	if f.sens != nil {
		return sensitivityUsage, ""
	}
	return captureUsage, strings.TrimPrefix(proxyUsage, "\n") + "\n" + runbookUsage
}

// enabled reports whether the command is a runbook rather than one capture.
func (f *runbookFlags) enabled() bool {
	return f.ab || f.serverCmd != "" || f.serverCmdFile != "" || f.runs != ""
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

// run builds the runbook from the parsed flags and the capture config,
// and runs it.
func (f *runbookFlags) run(ctx context.Context, cfg capture.Config, stdout, stderr io.Writer) error {
	rc := f.config(cfg)
	if cfg.PID != 0 && !f.reuse {
		return fmt.Errorf("%w: --pid is set from the started server; give it only with --reuse-server", errUsage)
	}
	return f.plan(ctx, rc, stdout, stderr)
}

// config is the runbook configuration of the lifecycle flags, without a plan.
func (f *runbookFlags) config(cfg capture.Config) runbook.Config {
	rc := runbook.Config{
		Capture: cfg,
		Lifecycle: runbook.Lifecycle{
			HealthURL: f.healthURL, StartupTimeout: f.startupTimeout, StopGrace: f.stopGrace,
			GPUFreeMiB: f.gpuFreeMiB, GPUFreeTimeout: f.gpuFreeTimeout, Reuse: f.reuse,
		},
		CacheDirs: f.cacheDirs,
		Finish:    finisher(f.lengths),
	}
	rc.GPUCoRunner, _ = f.gpuCoRunnerConfig()
	if f.provenanceEnv != "" {
		rc.ProvenanceEnv = append([]string(nil), runbook.DefaultProvenanceEnv...)
		for _, n := range strings.Split(f.provenanceEnv, ",") {
			if n = strings.TrimSpace(n); n != "" {
				rc.ProvenanceEnv = append(rc.ProvenanceEnv, n)
			}
		}
	}
	return rc
}

// plan makes the runs of --runs or the A/B flags and runs them.
func (f *runbookFlags) plan(ctx context.Context, rc runbook.Config, stdout, stderr io.Writer) error {
	if f.ab {
		a, err := serverCommand("a-cmd", f.aCmd, f.aCmdFile)
		if err != nil {
			return err
		}
		b, err := serverCommand("b-cmd", f.bCmd, f.bCmdFile)
		if err != nil {
			return err
		}
		if len(a.Argv) == 0 || len(b.Argv) == 0 {
			return fmt.Errorf("%w: asrprof ab needs --a-cmd and --b-cmd (or their -file forms)", errUsage)
		}
		if rc.Plan, err = runbook.ABPlan(f.order, !f.noWarm, a, b); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	} else {
		srv, err := serverCommand("server-cmd", f.serverCmd, f.serverCmdFile)
		if err != nil {
			return err
		}
		if len(srv.Argv) == 0 && !f.reuse {
			return fmt.Errorf("%w: --runs needs --server-cmd (a fresh server per run), or --reuse-server to measure a running one", errUsage)
		}
		if rc.Plan, err = runbook.ParseRuns(cmp.Or(f.runs, runbook.DefaultRuns), srv); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	_, err := runbook.Run(ctx, rc, stdout, stderr)
	return err
}

// gpuCoRunnerConfig is --gpu-corunner's co-runner (nil without it).
func (f *runbookFlags) gpuCoRunnerConfig() (*runbook.GPUCoRunner, error) {
	if f.gpuCoRunner == "" {
		return nil, nil
	}
	share, err := strconv.ParseFloat(strings.TrimSuffix(f.gpuCoRunner, "%"), 64)
	if err == nil && strings.HasSuffix(f.gpuCoRunner, "%") {
		share /= 100
	}
	if err != nil || !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("%w: --gpu-corunner %q: want a share of the GPU's time in (0, 1], e.g. 0.5 or 50%%", errUsage, f.gpuCoRunner)
	}
	return &runbook.GPUCoRunner{Share: share, Python: f.gpuCoRunnerPython}, nil
}
