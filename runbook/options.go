package runbook

import (
	"strings"
	"time"

	"github.com/asrprof/asrprof/option"
)

// Settings is what a runbook command (capture with --server-cmd or
// --runs, ab, sensitivity, what-if) is given beside the capture's Config.
// Options sets it; DefaultSettings is what a user who sets nothing gets.
type Settings struct {
	ServerCmd, ServerCmdFile, Runs string
	// A/B (ab, and what-if's order).
	ACmd, BCmd, ACmdFile, BCmdFile string
	Order                          string
	NoWarm                         bool

	Lifecycle     Lifecycle
	ProvenanceEnv []string // more names (DefaultProvenanceEnv are always recorded)
	CacheDirs     option.Repeated

	GPUCoRunner, GPUCoRunnerPython string // the share as given, the Python

	// Sensitivity.
	CPU, CPUMethod string
	GPUClocks      []int
	Cycles         int
	CPUBase        float64

	// What-if.
	Level  string
	Knobs  option.Repeated
	Rounds int
	Warm   bool
	Advice string
	DryRun bool
}

// DefaultOrder is the scored runs of an A/B session (ab, and each round
// of what-if) when --order is not given: alternating, so that a drift over
// the session hits both sides alike (ABBA cancels a linear one), 3 a side.
const DefaultOrder = "ABBAAB"

// DefaultSettings are the runbook's defaults.
func DefaultSettings() Settings {
	return Settings{
		Order:             DefaultOrder,
		Lifecycle:         Lifecycle{StartupTimeout: 30 * time.Minute, StopGrace: 10 * time.Second, GPUFreeMiB: 1024, GPUFreeTimeout: 2 * time.Minute},
		GPUCoRunnerPython: "/usr/bin/python3",
		CPU:               "100%,50%",
		CPUMethod:         MethodAuto,
		Cycles:            3,
		Rounds:            1,
		Advice:            "bottleneck",
	}
}

// The help groups of the runbook's options.
const (
	GroupAB          = "A/B runs"
	GroupSensitivity = "Sensitivity (docs/RUNBOOK.md)"
	GroupLifecycle   = "Server lifecycle and runs (docs/RUNBOOK.md)"
	GroupWhatIf      = "What-if (docs/CAPACITY.md)"
	GroupGPUCoRunner = "GPU co-runner (docs/CAPACITY.md)"
)

// Options lists the runbook options of the command cmd (capture, ab,
// sensitivity or what-if), in the order --help shows them; they set a
// Settings.
func Options(cmd string) []option.Option {
	server := []option.Option{
		{Name: "server-cmd", Local: true, Field: "ServerCmd", Usage: "start the server with `COMMAND` for each run (own process group, log in server.log);\nsplit like a shell's simple command, e.g. \"python3 serve.py --port 8000\""},
		{Name: "server-cmd-file", Local: true, Field: "ServerCmdFile", Usage: "read the server command from `FILE` (# comment lines, backslash-newline continues)"},
		{Name: "runs", Local: true, Field: "Runs", Usage: "runs to do, each with a fresh server and its own sub-bundle run-NAME/ (`LIST`);\nwarm is recorded, never scored (default with --server-cmd: " + DefaultRuns + ")"},
	}
	order := option.Option{Name: "order", Field: "Order", Usage: "the scored runs in order, letters A and B (`ORDER`); sub-bundles A-1, B-1, B-2, A-2, ..."}
	var opts []option.Option
	in := func(group string, os ...option.Option) {
		for _, o := range os {
			opts = append(opts, o.In(group))
		}
	}
	switch cmd {
	case "ab":
		in(GroupAB,
			option.Option{Name: "a-cmd", Field: "ACmd", Usage: "server `COMMAND` of side A (split like --server-cmd)"},
			option.Option{Name: "b-cmd", Field: "BCmd", Usage: "server `COMMAND` of side B"},
			option.Option{Name: "a-cmd-file", Field: "ACmdFile", Usage: "read side A's server command from `FILE`"},
			option.Option{Name: "b-cmd-file", Field: "BCmdFile", Usage: "read side B's server command from `FILE`"},
			order,
			option.Option{Name: "no-warm", Field: "NoWarm", Usage: "skip the unscored warm run of each side (A-warm, B-warm) before the scored runs"})
	case "what-if": // what-if plans its own runs (--order)
		in(GroupWhatIf,
			option.Option{Name: "level", Field: "Level", Usage: "the `LEVEL` whose advice to act on, e.g. c8 (default: the highest level whose verdict has a knob)"},
			option.Option{Name: "knob", Field: "Knobs", Usage: "`NAME=FLAG`: the server's flag for a knob, e.g. max_running=--max-num-seqs (repeatable;\nbuilt in: the reference server's, see above)"},
			option.Option{Name: "rounds", Field: "Rounds", Usage: "act on the advice up to `N` times, each round from the last one's command and verdict"},
			order,
			option.Option{Name: "warm", Field: "Warm", Usage: "run one unscored warm run of each side before a round's scored runs"},
			option.Option{Name: "advice", Field: "Advice", Usage: "the analysis whose table named advice is read: a built-in `NAME` or a .star file"},
			option.Option{Name: "dry-run", Field: "DryRun", Usage: "print round 1's runs and commands; run nothing"})
		in(GroupWhatIf, server[:2]...)
	case "sensitivity":
		in(GroupSensitivity, server...)
		in(GroupSensitivity,
			option.Option{Name: "cpu", Field: "CPU", Usage: "CPU allotments, comma-separated `LIST` of percentages of what the server could use (100% is added when missing)"},
			option.Option{Name: "cpu-base", Field: "CPUBase", Usage: "the CPU that is 100 %, in `CORES` (cgroup: then 100 % is a quota too; corunner: whole cores); default: the\ncores the server could use, one per busy thread of the cycle's unrestricted run, capped by its CPUs"},
			option.Option{Name: "cpu-method", Field: "CPUMethod", Usage: "how the CPU is restricted: `auto`, cgroup, corunner or affinity (see above)"},
			option.Option{Name: "cycles", Field: "Cycles", Usage: "how many times every allotment runs, each with a fresh server (`N`; the interval is over them)"},
			option.Option{Name: "gpu-clocks", Field: "GPUClocks", Usage: "vary the GPU instead of the CPU: lock every GPU's graphics clock at each of these MHz, comma-separated\n`LIST` such as 1980,1500,990 (the highest is 100 %; NVML, needs root; --cpu is then not used)"})
	default:
		in(GroupLifecycle, server...)
	}
	if cmd == "capture" || cmd == "sensitivity" {
		in(GroupGPUCoRunner,
			option.Option{Name: "gpu-corunner", Local: true, Field: "GPUCoRunner", Usage: "keep `SHARE` (0..1, e.g. 0.5 or 50%) of the GPU's time busy with a co-runner's own matmuls while each\ncapture runs (time-slicing with the server); its achieved share, measured with CUDA events,\ngoes to gpu_corunner.json in the bundle. Needs torch with CUDA (docs/CAPACITY.md)"},
			option.Option{Name: "gpu-corunner-python", Local: true, Field: "GPUCoRunnerPython", Usage: "the Python (`PATH`) with torch that runs the GPU co-runner"})
	}
	in(GroupLifecycle,
		option.Option{Name: "health-url", Field: "Lifecycle.HealthURL", Usage: "`URL` that answers 200 once the server is ready (default: --target + /health)"},
		option.Option{Name: "startup-timeout", Field: "Lifecycle.StartupTimeout", Usage: "how long a started server may take to become healthy (`DURATION`)"},
		option.Option{Name: "stop-grace", Field: "Lifecycle.StopGrace", Usage: "after SIGTERM to the server's process group, wait this long before SIGKILL (`DURATION`)"},
		option.Option{Name: "gpu-free-mib", Field: "Lifecycle.GPUFreeMiB", Usage: "after a stop, wait until every GPU uses less than `MIB` of memory (where NVML works)"},
		option.Option{Name: "gpu-free-timeout", Field: "Lifecycle.GPUFreeTimeout", Usage: "give up waiting for GPU memory after `DURATION` (an error)"})
	if cmd != "what-if" { // what-if starts the server as it is and as changed
		in(GroupLifecycle, option.Option{Name: "reuse-server", Field: "Lifecycle.Reuse", Usage: "when the target's port already answers, measure that server as it is instead of refusing"})
	}
	in(GroupLifecycle,
		option.Option{Name: "provenance-env", Field: "ProvenanceEnv", Usage: "more environment variable names to record with each run, comma-separated `LIST` (NAME* for a prefix);\nalways recorded: " + strings.Join(DefaultProvenanceEnv, ",")},
		option.Option{Name: "cache-dir", Field: "CacheDirs", Usage: "a compile cache `DIR` whose size and newest modification time are recorded before each run (repeatable)"})
	return opts
}
