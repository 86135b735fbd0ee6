package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/runbook"
)

const sensitivityUsage = `Usage: asrprof sensitivity --server-cmd COMMAND --target URL --dataset PATH --concurrency N --cpu 100%,75%,50% [flags]

Tells whether the server is CPU- or GPU-bound by cause, not correlation: it
runs the runbook (a fresh server per run, docs/RUNBOOK.md) at each CPU
allotment of --cpu, --cycles times over, and measures at the same level the
throughput and every stage. The sensitivity is the relative change in
throughput over the relative change in CPU (a stage's: of its rate,
1 / its mean duration), a least-squares slope over the allotments with a
95 % bootstrap interval over the cycles. A host-bound server shows ≈ 1 (its
throughput follows the CPU it gets), a GPU-bound one ≈ 0.

How the CPU is restricted (--cpu-method; the report says which was used):
  cgroup    a CFS bandwidth quota on a cgroup made for the server's process
            tree: cgroup v2 cpu.max, or cgroup v1 cpu.cfs_quota_us where
            the cpu controller is still on v1. 100 % is the CPU the server
            used in the cycle's unrestricted run (cores, measured over the
            scored passes); 50 % is a quota of half that.
  affinity  sched_setaffinity of every server thread to that share of its
            CPUs (a multi-threaded server on several cores; 50 % of 2 CPUs
            is 1 CPU).
  auto      cgroup where one can be made (root), else affinity.
What 100 % means matters: by default it is what the server used unrestricted,
so 50 % is half the CPU it got. A server that spins while it waits (a PyTorch
process syncing on its GPU) loses only spinning and reads ≈ 0; one that does
fixed CPU work per request and sleeps otherwise slows once its quota is below
its use, whatever bounds it. --cpu-base CORES makes 100 % a fixed capacity
(e.g. 1: one core, the most a single busy thread can use).
A co-runner that competes for the server's CPUs is not implemented.

--gpu-clocks 1980,990 varies the GPU instead: every GPU's graphics clock is
locked (nvmlDeviceSetGpuLockedClocks) at each clock for its runs and reset
after each; the sensitivity is then the relative change in throughput over
the relative change in clock (≈ 1 GPU-bound). Where NVML cannot lock clocks
it stops before any server starts and says why.

sensitivity.json (and runbook.json, one sub-bundle per run: cpu100-1/,
cpu50-1/, ...) go to --out; the bottleneck diagnosis of any of those runs
reads sensitivity.json as its strongest evidence.

Example (the reference server, host-bound: its scheduler is one busy core):
  asrprof sensitivity --server-cmd "/usr/bin/python3 refserver/refserver.py --port 18000" \
      --target http://127.0.0.1:18000 --profile-url http://127.0.0.1:18000 \
      --dataset refserver/data/refset/manifest.jsonl --max-samples 3 --concurrency 2 --repeats 1 \
      --cpu 100%,50% --cycles 3 --out runs/sens

Flags:
`

// sensitivityFlags are the flags of `asrprof sensitivity` beside the
// capture and runbook flags.
type sensitivityFlags struct {
	cpu, method, gpuClocks string
	cycles                 int
	base                   float64
}

func addSensitivityFlags(fs *flag.FlagSet) *sensitivityFlags {
	f := &sensitivityFlags{}
	fs.StringVar(&f.cpu, "cpu", "100%,50%", "CPU allotments, comma-separated `LIST` of percentages of the server's CPU (100% is added when missing)")
	fs.IntVar(&f.cycles, "cycles", 3, "how many times every allotment runs, each with a fresh server (`N`; the interval is over them)")
	fs.StringVar(&f.method, "cpu-method", runbook.MethodAuto, "how the CPU is restricted: `auto`, cgroup or affinity (see above)")
	fs.Float64Var(&f.base, "cpu-base", 0, "cgroup methods: the CPU that is 100 %, in `CORES` (then 100 % is a quota too); default: what the\nserver used in the cycle's unrestricted run")
	fs.StringVar(&f.gpuClocks, "gpu-clocks", "", "vary the GPU instead of the CPU: lock every GPU's graphics clock at each of these MHz, comma-separated\n`LIST` such as 1980,1500,990 (the highest is 100 %; NVML, needs root; --cpu is then not used)")
	return f
}

func runSensitivity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, rb, err := parseCapture("sensitivity", args, stdout, stderr)
	if err != nil {
		return err
	}
	sf := rb.sens
	var clocks intList
	if sf.gpuClocks != "" {
		if err := clocks.Set(sf.gpuClocks); err != nil {
			return fmt.Errorf("%w: --gpu-clocks %q: %v", errUsage, sf.gpuClocks, err)
		}
	}
	if rb.runs != "" {
		return fmt.Errorf("%w: sensitivity plans its own runs (--cpu × --cycles): drop --runs", errUsage)
	}
	shares, err := runbook.ParseAllotments(sf.cpu)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	srv, err := serverCommand("server-cmd", rb.serverCmd, rb.serverCmdFile)
	if err != nil {
		return err
	}
	rc := rb.config(cfg)
	_, err = runbook.Sensitivity(ctx, runbook.SensitivityConfig{
		Runbook: rc, Server: srv, Allotments: shares, Cycles: sf.cycles, Method: sf.method, BaseCores: sf.base, Stages: stageMeans, GPUClocks: clocks,
	}, stdout, stderr)
	return err
}

// stageMeans reads the stage table of the bundle in dir: level → stage →
// mean ms.
func stageMeans(ctx context.Context, dir string) (map[string]map[string]float64, error) {
	c, err := analysis.Load(dir)
	if err != nil {
		return nil, err
	}
	tabs, err := analysis.RunScripts(ctx, analysis.NewSession(c, analysis.Options{Timeout: analysis.DefaultTimeout}), []string{"stages"})
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]float64{}
	for _, t := range tabs {
		if t.Name != "stages" {
			continue
		}
		for _, row := range t.Values {
			lv, _ := row[0].(string)
			st := map[string]float64{}
			for j, v := range row[1:] {
				if m, ok := v.(map[string]any); ok {
					if ms, ok := m["mean_ms"].(float64); ok && !strings.HasPrefix(t.Columns[j+1], "client") {
						st[t.Columns[j+1]] = ms
					}
				}
			}
			out[lv] = st
		}
	}
	return out, nil
}
