package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/runbook"
)

const sensitivityUsage = `Usage: asrprof sensitivity --server-cmd COMMAND --target URL --dataset PATH --concurrency N --cpu 100%,75%,50% [flags]

Tells whether the server is CPU-bound by cause, not correlation: it runs the
runbook (a fresh server per run, docs/RUNBOOK.md) at each CPU allotment of
--cpu, --cycles times over, and measures at the same level the throughput
and every stage. The sensitivity is the relative change in throughput over
the relative change in CPU (a stage's: of its rate, 1 / its mean duration),
a least-squares slope over the allotments with a 95 % bootstrap interval
over the cycles. ≈ 1: throughput follows the CPU (host-bound); ≈ 0: it does
not (bound by something else: a GPU, a sleep, a peer).

What 100 % is: what the server could use, never what it used. By default,
whole cores: one per busy thread of the cycle's unrestricted run (a thread
that ran 0.2 of a core, or 0.1 and was runnable half the time), at least
one and at least its use rounded up, at most the CPUs it may run on. The answer
says it: "100 % = 1 core: 1 busy thread". --cpu-base CORES sets it
instead. (Halving what a server used throttles any server, whatever bounds
it: a sleeper that used 0.09 cores read 1.20 so; with 100 % = 1 core it
read -0.01.)

How the CPU is restricted (--cpu-method; the answer says which):
  cgroup    a CFS bandwidth quota of that share of 100 % (cgroup v2 cpu.max,
            or cgroup v1 cpu.cfs_quota_us where the cpu controller is on
            v1), on a cgroup holding the server's process tree. The slope is
            against the quota as a share of the CPU the server could get:
            where the host's other load held its busy threads to 74 % of
            their runnable time, a 0.5-core quota is 68 % of it, not 50 %.
  corunner  the server pinned to its 100 % CPUs, and a spinning process on
            each (sched_setaffinity), at the server's nice (50 %; another
            nice for other shares): a thread that computes keeps about half
            its core, one that mostly sleeps is barely delayed. The slope is
            against that share.
  affinity  sched_setaffinity of every server thread to that share of the
            100 % CPUs (whole CPUs: 50 % of 2 cores is 1 CPU).
  auto      cgroup where one can be made (root), else corunner.

What each can tell apart (measured; docs/CAPACITY.md):
  - Both read a sleeper ≈ 0 and a thread that computes ≈ 1: a fake server
    that sleeps 100 ms and computes 5 ms a request read -0.06 to 0.11, one
    whose thread computes 50 ms a request 0.84 to 1.08 (2 shared cores).
  - A quota cannot tell a thread that spin-waits for its GPU from one that
    computes: a CUDA engine in its GPU-bound state read 1.01 on the H200,
    because the quota stalls the waiting thread too and the GPU's feed
    shrinks with it. It also lets a server run its bursts at full speed
    within each 100 ms period: one that computes 25 ms and sleeps 25 ms a
    request read 0.01 to 0.12 under the quota, 0.62 to 0.73 (0.67 expected)
    with the co-runner.
  - The co-runner tells a sleeping thread from a computing one: on an idle
    host a 9 ms sleep + 1 ms compute loop lost 6 % of its rate beside a
    spinner, a busy loop 49 %. A thread that spin-waits is runnable all the
    time and shares its core like one that computes, in slices: a 1 ms
    compute + 9 ms spin-wait loop lost 22 % (sensitivity 0.45). Neither
    method is the GPU's side of the test: --gpu-clocks is.
  - Against the CPU received (also reported): ≈ 1 wherever what the server
    lost was work, whatever bounds it; below 1 where it lost spinning.
  - Where the host's other load leaves the server less than the limit, no
    method binds: the answer says "unknown" and why.

--gpu-clocks 1980,990 varies the GPU instead: every GPU's graphics clock is
locked (nvmlDeviceSetGpuLockedClocks) at each clock for its runs and reset
after each; the sensitivity is then the relative change in throughput over
the relative change in clock (≈ 1 GPU-bound). Where NVML cannot lock clocks
it stops before any server starts and says why. --gpu-corunner SHARE keeps
SHARE of the GPU's time busy with a co-runner's own kernels beside every
run (needs torch with CUDA; docs/CAPACITY.md says what it can tell apart).

Output: the answer first, then the runs by allotment and each allotment
over its cycles (never averaged together), on stdout in --format; a line a
run on stderr, the runs' full progress in sensitivity.log. sensitivity.json
(and runbook.json, one sub-bundle per run: cpu100-1/, cpu50-1/, ...) go to
--out; the bottleneck diagnosis of any of those runs reads sensitivity.json
as its strongest evidence.

Example (the reference server, host-bound: its scheduler is one busy core):
  asrprof sensitivity --server-cmd "/usr/bin/python3 refserver/refserver.py --port 18000" \
      --target http://127.0.0.1:18000 --profile-url http://127.0.0.1:18000 \
      --dataset refserver/data/refset/manifest.jsonl --max-samples 3 --concurrency 2 --repeats 1 \
      --cpu 100%,50% --cycles 3 --out runs/sens

Flags:
`

func runSensitivity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, rb, err := parseCapture("sensitivity", args, stdout, stderr)
	if err != nil {
		return err
	}
	if rb.Runs != "" {
		return fmt.Errorf("%w: sensitivity plans its own runs (--cpu × --cycles): drop --runs", errUsage)
	}
	shares, err := runbook.ParseAllotments(rb.CPU)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	srv, err := serverCommand("server-cmd", rb.ServerCmd, rb.ServerCmdFile)
	if err != nil {
		return err
	}
	_, err = runbook.Sensitivity(ctx, runbook.SensitivityConfig{
		Runbook: rb.config(cfg), Server: srv, Allotments: shares, Cycles: rb.Cycles, Method: rb.CPUMethod, BaseCores: rb.CPUBase, Stages: stageMeans, GPUClocks: rb.GPUClocks,
	}, stdout, stderr)
	return err
}

// stageMeans reads the stage table of the bundle in dir: level → stage →
// mean ms (analysis.StageMeans), the client's own stages left out.
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
		stages, means := analysis.StageMeans(t)
		for lv, ms := range means {
			out[lv] = map[string]float64{}
			for k, st := range stages {
				if !math.IsNaN(ms[k]) && !strings.HasPrefix(st, "client") {
					out[lv][st] = ms[k]
				}
			}
		}
	}
	return out, nil
}
