package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/cpu"
	"github.com/asrprof/asrprof/probe/cuda"
	"github.com/asrprof/asrprof/probe/doctor"
	"github.com/asrprof/asrprof/probe/gpu"
	"github.com/asrprof/asrprof/probe/proc"
	"github.com/asrprof/asrprof/probe/sched"
	"github.com/asrprof/asrprof/probe/servermetrics"
)

// probeKind is one row of the probe registry: a probe's name as --probes
// spells it, whether --probes auto starts it, one line for --help, and how
// it is made from the capture's configuration.
type probeKind struct {
	name string
	auto bool
	help string
	make func(cfg *Config) probe.Probe
}

// probeKinds is the probe registry: the one place that says which probes
// exist, in start order. buildProbes, the --probes help and its validation
// all read it.
func probeKinds() []probeKind {
	return []probeKind{
		{"gpu", true, "NVML samples of every GPU (or --gpus): utilization, memory, power, clocks, GPM SM/tensor activity",
			func(cfg *Config) probe.Probe {
				return gpu.New(gpu.Config{GPUs: cfg.GPUs, GPMWindow: cfg.GPMWindow, PCIe: cfg.GPUPCIe})
			}},
		{"cpu", true, "on-CPU stacks of the server's threads as pprof (Python frames with the otel engine)",
			func(cfg *Config) probe.Probe { return cpu.New(cpu.Config{Hz: cfg.CPUHz, Engine: cfg.CPUEngine}) }},
		{"sched", true, "per-thread CPU time, run-queue wait and switches (eBPF)",
			func(*Config) probe.Probe { return sched.New() }},
		{"cuda", true, "CUDA kernel and graph launches per thread, and time inside the driver's blocking calls\n          (synchronize, device-to-host copies) in 10 ms bins (uprobes on libcuda)",
			func(*Config) probe.Probe { return cuda.New() }},
		{"proc", false, "per-thread CPU time from /proc; in auto, started only where sched cannot run",
			func(cfg *Config) probe.Probe { return proc.New(proc.Config{Hz: cfg.ProcHz}) }},
		{"cores", false, "per-core time from /proc/stat and the busiest other processes, for the co-tenant check;\n" +
			"          in auto, started beside sched (proc writes the same where it runs)",
			func(cfg *Config) probe.Probe { return proc.New(proc.Config{Hz: cfg.ProcHz, CoresOnly: true}) }},
		{"metrics", true, "the server's Prometheus /metrics (--server-metrics), scraped every --server-metrics-interval:\n" +
			"          running and waiting requests, token counters, latency histograms, per pass",
			func(cfg *Config) probe.Probe {
				return servermetrics.New(servermetrics.Config{URL: cfg.ServerMetrics, Base: cfg.Target, Interval: cfg.ServerMetricsInterval})
			}},
	}
}

// ProbeHelp is the --probes part of --help: one line per probe.
func ProbeHelp() string {
	var b strings.Builder
	for _, k := range probeKinds() {
		fmt.Fprintf(&b, "\n  %-7s %s", k.name, k.help)
	}
	return b.String()
}

// buildProbes makes the probes that names (the --probes list) asks for:
// "auto" (or nothing) means every probe of the registry marked auto; proc
// then starts only as the fallback for sched (startProbes). "none": none.
func buildProbes(cfg *Config) ([]probe.Probe, error) {
	if cfg.noProbes() {
		return nil, nil
	}
	kinds := probeKinds()
	var known []string
	for _, k := range kinds {
		known = append(known, k.name)
	}
	for _, n := range cfg.Probes {
		if n != "auto" && !slices.Contains(known, n) {
			return nil, fmt.Errorf("%w: --probes: unknown probe %q (known: %s, auto, none)", ErrInvalidConfig, n, strings.Join(known, ", "))
		}
	}
	if slices.Contains(cfg.Probes, "proc") && slices.Contains(cfg.Probes, "cores") {
		return nil, fmt.Errorf("%w: --probes: proc writes the per-core record too: name proc or cores, not both", ErrInvalidConfig)
	}
	var ps []probe.Probe
	for _, k := range kinds {
		if slices.Contains(cfg.Probes, k.name) || (cfg.autoProbes() && k.auto) {
			ps = append(ps, k.make(cfg))
		}
	}
	return ps, nil
}

// autoProbes says whether --probes is auto (or empty).
func (c *Config) autoProbes() bool { return len(c.Probes) == 0 || slices.Contains(c.Probes, "auto") }

// noProbes says whether --probes is none.
func (c *Config) noProbes() bool { return len(c.Probes) == 1 && c.Probes[0] == "none" }

// probeSet runs the probes that started.
type probeSet struct {
	running []probe.Probe
	status  map[string]string // name → "on" or why not
	details map[string]string // name → how a running probe runs (probe.Describer)

	sinks map[string]*countingSink // name → the sink the probe writes through
	marks map[string]uint64        // name → its record count when the pass began
	empty map[string][]string      // name → the scored passes it recorded nothing in
	// idle: name → the scored passes an activity-driven probe recorded
	// nothing in while the target used too little CPU to show (idleBelow;
	// not failures), and idleCut: name → that CPU time in seconds;
	// pid and cpuAt: the target, and its tree's CPU seconds when the pass
	// began (-1: not read)
	idle    map[string][]string
	idleCut map[string]float64
	pid     int
	cpuAt   float64
	// threadsAt is each thread's CPU time at the pass's start, when a
	// probe samples per thread (probe.PerThreadActivity); nil otherwise.
	threadsAt map[int]float64
	// gone is the first pass at whose end the target process had exited.
	gone string

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
	c, err := doctor.EnableBPFStats()
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
// remote is the target's host when it is another machine (RemoteHost).
func resolvePID(pid int, target string) (_ int, how, remote string) {
	if pid > 0 {
		return pid, fmt.Sprintf("pid %d (from --pid)", pid), ""
	}
	u, err := url.Parse(target)
	if err != nil {
		return 0, bundle.PIDUnknown + ": " + err.Error(), ""
	}
	if host := doctor.RemoteHost(u.Hostname()); host != "" {
		return 0, bundle.PIDUnknown + ": " + host + " is not this machine (give --pid)", host
	}
	port, err := doctor.TargetPort(target)
	if err != nil {
		return 0, bundle.PIDUnknown + ": " + err.Error(), ""
	}
	p, err := proctree.FindListener(port)
	if err != nil {
		how := fmt.Sprintf("%s: %v; give --pid PID (or run asrprof as the server's user or root)", bundle.PIDUnknown, err)
		if hint := proctree.PortHint(port); hint != "" {
			how += "; " + hint
		}
		return 0, how, ""
	}
	return p, fmt.Sprintf("pid %d (listening on port %d)", p, port), ""
}

// startProbes finds the target's process and starts each probe on it;
// their states go into the manifest. One that cannot run says why in one
// line and the capture goes on; when sched is not supported and proc was
// not asked for explicitly (auto), proc starts in its place, and when sched
// runs, cores starts beside it (the per-core record, which proc would
// write). Each probe writes through a sink of its own that counts what it
// records and shows it to the observer.
func (k *skeleton) startProbes(ctx context.Context, ps []probe.Probe) *probeSet {
	set := &probeSet{status: map[string]string{}, details: map[string]string{},
		sinks: map[string]*countingSink{}, marks: map[string]uint64{}, empty: map[string][]string{},
		idle: map[string][]string{}, idleCut: map[string]float64{}, cpuAt: -1}
	if len(ps) == 0 {
		return set
	}
	cfg, say := &k.cfg, k.say
	pid, how, host := resolvePID(cfg.PID, cfg.Target)
	if len(cfg.Agents) > 0 {
		pid, how, host = 0, "found by each agent on its host (--agent)", ""
	}
	k.note("target: " + how)
	set.pid = pid
	// A server on another machine: this machine's GPUs are not its GPUs,
	// and samples of them would stand as the server's in every table.
	remote := ""
	if host != "" && cfg.autoProbes() {
		remote = host + " is not this machine, so these GPUs are not the server's; --agent URL runs the probes on its host, --probes gpu samples these anyway"
	}
	t := probe.Target{PID: pid} // the probes follow its descendants (watch.Pids)
	for i := 0; i < len(ps); i++ {
		p := ps[i]
		if remote != "" && p.Name() == "gpu" {
			set.status[p.Name()] = "off: " + remote
			k.note(fmt.Sprintf("probe %s: off (%s)", p.Name(), remote))
			continue
		}
		cs := &countingSink{Sink: k.w, name: p.Name(), obs: k.obs}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.Start(sctx, t, cs)
		cancel()
		switch {
		case err == nil:
			if p.Name() == "sched" && cfg.autoProbes() && pid > 0 && !slices.Contains(cfg.Probes, "proc") && !slices.Contains(cfg.Probes, "cores") {
				ps = append(ps, proc.New(proc.Config{Hz: cfg.ProcHz, CoresOnly: true}))
			}
			set.running = append(set.running, p)
			set.sinks[p.Name()] = cs
			set.status[p.Name()] = "on"
			if d, ok := p.(probe.Describer); ok && d.Detail() != "" {
				set.details[p.Name()] = d.Detail()
				k.note(fmt.Sprintf("probe %s: %s", p.Name(), d.Detail()))
			}
			continue
		case errors.Is(err, probe.ErrNotSupported):
			set.status[p.Name()] = "off: " + err.Error()
			k.note(fmt.Sprintf("probe %s: off (%v)", p.Name(), err))
		default:
			set.status[p.Name()] = "failed: " + err.Error()
			say(fmt.Sprintf("probe %s: failed to start (%v); the capture goes on without it", p.Name(), err))
		}
		if p.Name() == "sched" && cfg.autoProbes() && pid > 0 {
			ps = append(ps, proc.New(proc.Config{Hz: cfg.ProcHz}))
		}
	}
	if cfg.BPFStats && len(set.running) > 0 {
		set.startBPFStats(say)
	}
	k.mu.Lock()
	k.manifest.Extra = map[string]any{"target_pid": pid, "target_pid_how": how, "probes": set.status, "probe_details": set.details}
	k.mu.Unlock()
	return set
}

// countingSink is the sink one probe writes through: it counts the records
// the probe appends, so that a probe which is on but records nothing is
// seen, whatever the probe believes about itself. It is also where live
// consumers (asrprof serve's /metrics) see the records: obs gets each one
// as it is appended.
type countingSink struct {
	probe.Sink
	n    atomic.Uint64
	name string
	obs  Observer
}

func (c *countingSink) Append(file string, rec any) error {
	c.n.Add(1)
	if c.obs != nil {
		c.obs.ProbeRecord(c.name, file, rec)
	}
	return c.Sink.Append(file, rec)
}

// periodCount is what a probe recorded in one pass: the records it
// appended, or, for a probe that writes whole files (probe.PeriodCounter),
// what it says it wrote.
func (s *probeSet) periodCount(pr probe.Probe) uint64 {
	if pc, ok := pr.(probe.PeriodCounter); ok {
		return uint64(pc.PeriodCount())
	}
	return s.sinks[pr.Name()].n.Load() - s.marks[pr.Name()]
}

// idleCPU is the target's CPU time in a pass under which an
// activity-driven probe whose rate is not known (probe.ActivityDriven) may
// have nothing to show, and under which no thread of a per-thread sampler
// need have been sampled (probe.PerThreadActivity): at the cpu probe's
// default 99 Hz, 3 sampling periods.
const idleCPU = 0.030

// idleSamples is the mean record count under which a working
// activity-driven probe of known rate may record nothing in a pass: a
// sampler's records over a target's short bursts come as a Poisson count,
// none with probability e^-n, and below ln(1000) ≈ 6.9 a working probe
// records nothing more often than one pass in a thousand. At 99 Hz that is
// 70 ms of the target's CPU time; at --cpu-hz 10, 0.69 s.
var idleSamples = math.Log(1000)

// idleBelow is the target's CPU time in a pass under which pr may rightly
// record nothing.
func idleBelow(pr probe.ActivityDriven) float64 {
	if r := pr.ActivityRate(); r > 0 {
		return idleSamples / r
	}
	return idleCPU
}

func (s *probeSet) begin(p probe.Period) {
	s.cpuAt, s.threadsAt = -1, nil
	for _, pr := range s.running {
		if _, ok := pr.(probe.ActivityDriven); ok && s.pid > 0 && s.cpuAt < 0 {
			s.cpuAt = cpulimit.TreeCPUSeconds(s.pid)
		}
		if pt, ok := pr.(probe.PerThreadActivity); ok && s.pid > 0 && s.threadsAt == nil && pt.PerThreadActivity() {
			s.threadsAt = cpulimit.ThreadCPUSeconds(s.pid)
		}
	}
	for _, pr := range s.running {
		s.marks[pr.Name()] = s.sinks[pr.Name()].n.Load()
		pr.Begin(p)
	}
}

// end ends the pass for every probe, and notes each probe that recorded
// nothing in a scored pass: a failure, unless the probe is activity-driven
// and the target hardly ran in the pass.
func (s *probeSet) end(ctx context.Context, p probe.Period, say func(string)) {
	if s.pid > 0 && s.gone == "" && proctree.Exited(s.pid) {
		s.gone = fmt.Sprintf("%s repeat %d", model.LevelLabel(p.Level), p.Repeat)
		if p.Warmup {
			s.gone = model.LevelLabel(p.Level) + " warmup"
		}
		say(fmt.Sprintf("target: pid %d has exited (by the end of %s): the host probes see nothing of the server from here on", s.pid, s.gone))
	}
	used := -1.0
	if s.cpuAt >= 0 {
		used = cpulimit.TreeCPUSeconds(s.pid) - s.cpuAt
	}
	busiest := -1.0 // the busiest thread's CPU time in the pass, for per-thread samplers
	if s.threadsAt != nil {
		for tid, v := range cpulimit.ThreadCPUSeconds(s.pid) {
			busiest = max(busiest, v-s.threadsAt[tid])
		}
	}
	for _, pr := range s.running {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := pr.End(ectx, p); err != nil {
			say(fmt.Sprintf("probe %s: %v", pr.Name(), err))
		}
		cancel()
		if p.Warmup || s.periodCount(pr) > 0 {
			continue
		}
		pass := fmt.Sprintf("%s repeat %d", model.LevelLabel(p.Level), p.Repeat)
		if ad, ok := pr.(probe.ActivityDriven); ok && used >= 0 && used < idleBelow(ad) {
			s.idle[pr.Name()] = append(s.idle[pr.Name()], fmt.Sprintf("%s (%.0f ms of CPU)", pass, 1000*used))
			s.idleCut[pr.Name()] = max(s.idleCut[pr.Name()], idleBelow(ad))
			continue
		}
		if pt, ok := pr.(probe.PerThreadActivity); ok && busiest >= 0 && busiest < idleCPU && pt.PerThreadActivity() {
			s.idle[pr.Name()] = append(s.idle[pr.Name()], fmt.Sprintf("%s (%.0f ms of CPU, its busiest thread %.0f ms: sampled per thread)", pass, 1000*used, 1000*busiest))
			s.idleCut[pr.Name()] = max(s.idleCut[pr.Name()], idleCPU)
			continue
		}
		s.empty[pr.Name()] = append(s.empty[pr.Name()], pass)
	}
}

// emptyReport says, as loudly as a failure, which probes were on and
// recorded nothing in scored passes, and notes the activity-driven ones
// that had nothing to record (the target idle). passes is the number of
// scored passes that ran.
func (s *probeSet) emptyReport(passes int, say func(string)) {
	which := func(got []string) string {
		if len(got) > 4 {
			return strings.Join(got[:4], ", ") + fmt.Sprintf(", and %d more", len(got)-4)
		}
		return strings.Join(got, ", ")
	}
	for _, name := range slices.Sorted(maps.Keys(s.empty)) {
		got := s.empty[name]
		say(fmt.Sprintf("ERROR: probe %s was on but recorded nothing in %d of %d scored passes (%s); its tables for those passes are empty, not zero",
			name, len(got), passes, which(got)))
	}
	for _, name := range slices.Sorted(maps.Keys(s.idle)) {
		got := s.idle[name]
		why := "an idle server, not a failure"
		if s.gone != "" {
			why = fmt.Sprintf("an idle server, or the server's process (pid %d), which had exited by the end of %s", s.pid, s.gone)
		}
		say(fmt.Sprintf("probe %s recorded nothing in %d of %d scored passes (%s): the server's processes used under %.0f ms of CPU in each, too little to show; %s",
			name, len(got), passes, which(got), 1000*s.idleCut[name], why))
	}
}

// recordGaps puts what emptyReport found in the manifest: the failures as
// extra.probe_empty and incomplete reasons, the idle passes as
// extra.probe_idle.
func (s *probeSet) recordGaps(m *model.Manifest) {
	x := extra(m)
	if len(s.empty) > 0 {
		x["probe_empty"] = s.empty
		for _, name := range slices.Sorted(maps.Keys(s.empty)) {
			m.Incomplete = append(m.Incomplete, fmt.Sprintf("probe %s was on but recorded nothing in %d scored passes", name, len(s.empty[name])))
		}
	}
	if len(s.idle) > 0 {
		x["probe_idle"] = s.idle
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
	s.running = nil
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
