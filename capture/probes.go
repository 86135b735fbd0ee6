package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/bpf"
	"github.com/asrprof/asrprof/probe/cpu"
	"github.com/asrprof/asrprof/probe/cuda"
	"github.com/asrprof/asrprof/probe/gpu"
	"github.com/asrprof/asrprof/probe/proc"
	"github.com/asrprof/asrprof/probe/proctree"
	"github.com/asrprof/asrprof/probe/sched"
)

// ProbeNames lists the probes --probes accepts, in start order.
var ProbeNames = []string{"gpu", "cpu", "sched", "cuda", "proc"}

// buildProbes is the probe registry: the one place that says which probes
// exist. names is the --probes list; "auto" means every probe this machine
// supports, with proc only as the fallback for sched.
func buildProbes(cfg *Config) ([]probe.Probe, error) {
	names, procHz, cpuHz := cfg.Probes, cfg.ProcHz, cfg.CPUHz
	auto := len(names) == 0 || (len(names) == 1 && names[0] == "auto")
	if len(names) == 1 && names[0] == "none" {
		return nil, nil
	}
	want := map[string]bool{}
	if auto {
		want["gpu"], want["cpu"], want["sched"], want["cuda"] = true, true, true, true
	}
	for _, n := range names {
		if n == "auto" {
			continue
		}
		known := false
		for _, k := range ProbeNames {
			known = known || k == n
		}
		if !known {
			return nil, fmt.Errorf("%w: --probes: unknown probe %q (known: %s, auto, none)", ErrInvalidConfig, n, strings.Join(ProbeNames, ", "))
		}
		want[n] = true
	}
	var ps []probe.Probe
	if want["gpu"] {
		ps = append(ps, gpu.New(gpu.Config{GPUs: cfg.GPUs, GPMWindow: cfg.GPMWindow, PCIe: cfg.GPUPCIe}))
	}
	if want["cpu"] {
		ps = append(ps, cpu.New(cpu.Config{Hz: cpuHz, Engine: cfg.CPUEngine}))
	}
	if want["sched"] {
		ps = append(ps, sched.New(sched.Config{}))
	}
	if want["cuda"] {
		ps = append(ps, cuda.New(cuda.Config{}))
	}
	if want["proc"] {
		ps = append(ps, proc.New(proc.Config{Hz: procHz}))
	}
	return ps, nil
}

// probeSet runs the probes that started.
type probeSet struct {
	running []probe.Probe
	status  map[string]string // name → "on" or why not
	details map[string]string // name → how a running probe runs (probe.Describer)

	// With --bpf-stats: the statistics switch, and when and from what the
	// probes' BPF costs are counted.
	stats     io.Closer
	statsFrom time.Time
	costBase  map[string]bpfCost
}

type bpfCost struct {
	runtime time.Duration
	runs    uint64
}

// startBPFStats turns on BPF run-time statistics and takes the probes'
// costs so far as the baseline.
func (s *probeSet) startBPFStats(say func(string)) {
	c, err := bpf.EnableRunTimeStats()
	if err != nil {
		say(fmt.Sprintf("--bpf-stats: %v; the probes' BPF time is not measured", err))
		return
	}
	s.stats, s.statsFrom, s.costBase = c, time.Now(), s.bpfCosts()
}

// bpfCosts reads the cumulative BPF costs of the running probes that
// report them.
func (s *probeSet) bpfCosts() map[string]bpfCost {
	out := map[string]bpfCost{}
	for _, pr := range s.running {
		if c, ok := pr.(probe.BPFCoster); ok {
			if rt, runs, err := c.BPFCost(); err == nil {
				out[pr.Name()] = bpfCost{rt, runs}
			}
		}
	}
	return out
}

// bpfReport returns, with --bpf-stats, each probe's BPF run time and runs
// since the statistics were turned on, and says them in one line.
func (s *probeSet) bpfReport(say func(string)) map[string]any {
	if s.stats == nil {
		return nil
	}
	wall := time.Since(s.statsFrom).Seconds()
	out := map[string]any{}
	var parts []string
	var total time.Duration
	now := s.bpfCosts()
	for _, name := range slices.Sorted(maps.Keys(now)) {
		c, b := now[name], s.costBase[name]
		rt, runs := c.runtime-b.runtime, c.runs-b.runs
		nsPerRun := 0.0
		if runs > 0 {
			nsPerRun = float64(rt.Nanoseconds()) / float64(runs)
		}
		out[name] = map[string]any{"runtime_s": rt.Seconds(), "runs": runs, "ns_per_run": nsPerRun, "wall_s": wall}
		parts = append(parts, fmt.Sprintf("%s %.3f s in %d runs (%.0f ns a run)", name, rt.Seconds(), runs, nsPerRun))
		total += rt
	}
	if len(parts) > 0 && wall > 0 {
		say(fmt.Sprintf("probes' BPF programs: %s; %.2f %% of one CPU over %.0f s, charged to the threads they ran in",
			strings.Join(parts, ", "), 100*total.Seconds()/wall, wall))
	}
	return out
}

// resolvePID finds the target's process: an explicit pid, or the process
// listening on the target URL's port when the target is on this machine.
func resolvePID(pid int, target string) (int, string) {
	if pid > 0 {
		return pid, fmt.Sprintf("pid %d (from --pid)", pid)
	}
	u, err := url.Parse(target)
	if err != nil {
		return 0, "target pid unknown: " + err.Error()
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); !(host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified()))) {
		return 0, "target pid unknown: " + host + " is not this machine (give --pid)"
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		port = 80
		if u.Scheme == "https" {
			port = 443
		}
	}
	p, err := proctree.FindListener(port)
	if err != nil {
		return 0, fmt.Sprintf("target pid unknown: no process found listening on port %d: %v", port, err)
	}
	return p, fmt.Sprintf("pid %d (listening on port %d)", p, port)
}

// startProbes starts each probe; one that cannot run says why in one line
// and the capture goes on. When sched is not supported and proc was not
// asked for explicitly, proc is started as its fallback.
func startProbes(ctx context.Context, ps []probe.Probe, t probe.Target, sink probe.Sink, auto bool, procHz float64, say func(string)) *probeSet {
	set := &probeSet{status: map[string]string{}, details: map[string]string{}}
	schedOK := false
	for i := 0; i < len(ps); i++ {
		p := ps[i]
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.Start(sctx, t, sink)
		cancel()
		switch {
		case err == nil:
			set.running = append(set.running, p)
			set.status[p.Name()] = "on"
			if d, ok := p.(probe.Describer); ok && d.Detail() != "" {
				set.details[p.Name()] = d.Detail()
				say(fmt.Sprintf("probe %s: %s", p.Name(), d.Detail()))
			}
			schedOK = schedOK || p.Name() == "sched"
			continue
		case errors.Is(err, probe.ErrNotSupported):
			set.status[p.Name()] = "off: " + err.Error()
			say(fmt.Sprintf("probe %s: off (%v)", p.Name(), err))
		default:
			set.status[p.Name()] = "failed: " + err.Error()
			say(fmt.Sprintf("probe %s: failed to start (%v); the capture goes on without it", p.Name(), err))
		}
		if p.Name() == "sched" && auto && t.PID > 0 {
			ps = append(ps, proc.New(proc.Config{Hz: procHz}))
		}
	}
	return set
}

func (s *probeSet) begin(p probe.Period) {
	for _, pr := range s.running {
		pr.Begin(p)
	}
}

func (s *probeSet) end(ctx context.Context, p probe.Period, say func(string)) {
	for _, pr := range s.running {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := pr.End(ectx, p); err != nil {
			say(fmt.Sprintf("probe %s: %v", pr.Name(), err))
		}
		cancel()
	}
}

func (s *probeSet) stop(say func(string)) {
	if s.stats != nil {
		s.stats.Close()
		s.stats = nil
	}
	for _, pr := range s.running {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := pr.Stop(ctx); err != nil {
			say(fmt.Sprintf("probe %s: stop: %v", pr.Name(), err))
		}
		cancel()
	}
}

// losses asks the running probes what they lost (probe.LossReporter),
// says it, and returns it by probe name.
func (s *probeSet) losses(say func(string)) map[string]string {
	out := map[string]string{}
	for _, pr := range s.running {
		if l, ok := pr.(probe.LossReporter); ok {
			if msg := l.Losses(); msg != "" {
				out[pr.Name()] = msg
				say(fmt.Sprintf("probe %s: %s", pr.Name(), msg))
			}
		}
	}
	return out
}

// clockOffsetter is implemented by probes whose samples carry another
// clock's timestamps (NVML): the offset of that clock from the system's.
type clockOffsetter interface {
	ClockOffset() (ns int64, ok bool)
}

// clockOffsets returns the offsets the running probes measured, by name.
func (s *probeSet) clockOffsets() map[string]int64 {
	out := map[string]int64{}
	for _, pr := range s.running {
		if c, ok := pr.(clockOffsetter); ok {
			if ns, ok := c.ClockOffset(); ok {
				out[pr.Name()+"_minus_wall_ns"] = ns
			}
		}
	}
	return out
}
