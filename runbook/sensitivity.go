package runbook

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/table"
)

// Ways of restricting the server's CPU (--cpu-method).
const (
	MethodAuto     = "auto"
	MethodCgroup   = "cgroup"
	MethodAffinity = "affinity"
	MethodCoRunner = "corunner"
)

// SensitivityConfig is an `asrprof sensitivity` session: the runbook of
// every run (its Capture holds one level; its Plan is made here), the
// server, the CPU allotments and how many cycles of them.
type SensitivityConfig struct {
	Runbook Config
	Server  ServerCmd
	// Allotments are shares of what the server could use (1 = 100 %,
	// 0.5 = half); 1 is run first in each cycle, added when missing.
	Allotments []float64
	// Cycles is how many times every allotment runs, each with a fresh
	// server: the repeats the intervals are taken over.
	Cycles int
	Method string // MethodAuto, MethodCgroup, MethodAffinity or MethodCoRunner
	// BaseCores, when > 0, is what 100 % means, in cores (for the cgroup
	// method 100 % is then a quota too). 0: the cores the server could
	// use, from its cycle's unrestricted run: one per busy thread (one
	// that ran BusyThreadCores or was runnable BusyRunnable of the time),
	// at least one and at least the cores
	// it used (rounded up), at most the CPUs it may run on.
	BaseCores float64
	// Stages reads a run's per-stage mean durations (ms) at each level
	// (nil: no per-stage sensitivity); asrprof passes the stage table of
	// the analysis.
	Stages func(ctx context.Context, dir string) (map[string]map[string]float64, error)
	// GPUClocks, when set, makes it a GPU-clock session: the runs lock
	// every GPU's graphics clock at each of these MHz (the highest is
	// 100 %) instead of restricting the CPU; Clocks locks them (nil: NVML).
	GPUClocks []int
	Clocks    ClockLocker
}

// share is the share of what the server could get that the run's limit
// left it: Effective where known, else the allotment.
func share(r bundle.SensitivityRun) float64 {
	if r.Effective > 0 {
		return r.Effective
	}
	return r.Allotment
}

// SensitivityLog is the file at the top of --out that gets the runs' full
// progress (the runbook's and each capture's); stderr gets a line a run.
const SensitivityLog = "sensitivity.log"

// Sensitivity runs the allotments, each cycle with a fresh server per
// allotment, and reports how throughput and each stage follow the CPU
// the server gets. stdout gets the answer first, then the runs by
// allotment, in the capture's --format; stderr a line per run (the full
// progress goes to sensitivity.log); sensitivity.json and runbook.json go
// to the top of --out.
func Sensitivity(ctx context.Context, sc SensitivityConfig, stdout, stderr io.Writer) (*bundle.SensitivityReport, error) {
	if err := checkSensitivity(&sc); err != nil {
		return nil, err
	}
	out := sc.Runbook.Capture.Out
	if err := checkOut(out, File, "runbook", sc.Runbook.Capture.Overwrite); err != nil {
		return nil, err
	}
	lv := sc.Runbook.Capture.Levels()[0]
	kind, what := "cpu", "CPU"
	if len(sc.GPUClocks) > 0 {
		kind, what = "gpu-clocks", "GPU clock"
		sc.Clocks = cmp.Or(sc.Clocks, NVMLClocks(nil))
		// Before any server starts: can the clocks be locked here at all?
		if err := sc.Clocks.Reset(); err != nil {
			return nil, fmt.Errorf("--gpu-clocks: %w", err)
		}
	}
	var tag [3]byte
	rand.Read(tag[:])
	group := "asrprof-" + hex.EncodeToString(tag[:]) + "-" // the cgroups' names: + probe, + each run's
	rep := &bundle.SensitivityReport{Schema: Schema, Kind: kind, Level: lv.Name, Allotments: sc.Allotments, Cycles: sc.Cycles, Confidence: 0.95, Runs: []bundle.SensitivityRun{}}
	method := sc.Method
	if kind == "cpu" && method == MethodAuto {
		// The cgroup method where a group can be made here (root), else
		// the co-runner, which needs no privilege at 50 %.
		if g, err := cpulimit.NewGroup("/sys", group+"probe"); err != nil {
			method = MethodCoRunner
			rep.Notes = append(rep.Notes, "--cpu-method auto: the co-runner, as no cgroup can be made here: "+err.Error())
		} else {
			method = MethodCgroup
			g.Remove()
		}
	}
	runOf := map[string]bundle.SensitivityRun{} // by dir: its cycle and allotment
	var plan []RunSpec
	for c := 1; c <= sc.Cycles; c++ {
		for _, a := range sc.Allotments {
			name := fmt.Sprintf("cpu%s-%d", pct(a), c)
			if kind != "cpu" {
				name = fmt.Sprintf("gpu%dmhz-%d", clockOf(sc.GPUClocks, a), c)
			}
			plan = append(plan, RunSpec{Name: name, Scored: true, Dir: name, Server: sc.Server})
			runOf[name] = bundle.SensitivityRun{Dir: name, Cycle: c, Allotment: a}
		}
	}
	rc := sc.Runbook
	rc.Plan = plan
	if err := checkConfig(&rc); err != nil { // before the log: a refused plan writes nothing
		return nil, err
	}
	logf, err := createLog(out, SensitivityLog)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	caps := map[int]capacity{} // cycle → what 100 % is
	var warns []string
	runs := map[string]*bundle.SensitivityRun{}
	fmt.Fprintf(stderr, "sensitivity at %s: %d runs (%d allotments of the %s × %s), a fresh server each; their progress: %s\n",
		lv.Name, len(plan), len(sc.Allotments), what, countOf(sc.Cycles, "cycle"), filepath.Join(out, SensitivityLog))
	// Run calls its hooks one run at a time, from its own goroutine.
	rc.Around = func(spec RunSpec, pid int) (func(*RunRecord), error) {
		r := runOf[spec.Dir]
		sr := &r
		runs[spec.Dir] = sr
		cp, haveCap := caps[sr.Cycle]
		i := slices.IndexFunc(plan, func(p RunSpec) bool { return p.Dir == spec.Dir }) + 1
		if sc.BaseCores > 0 {
			cp = capacity{cores: sc.BaseCores, why: "--cpu-base", ran: cp.ran}
			haveCap = true
		}
		// after ends the run's limit once its capture is over, and says
		// what the limit was.
		var after func(rec *RunRecord) string
		switch {
		case kind != "cpu":
			// Every GPU at the run's clock; after resets them.
			sr.ClockMHz = clockOf(sc.GPUClocks, sr.Allotment)
			rep.Method, rep.MethodNote = "nvml locked clocks", "nvmlDeviceSetGpuLockedClocks(min = max = the run's clock) on every GPU, reset after each run"
			if err := sc.Clocks.Lock(sr.ClockMHz); err != nil {
				sr.Error = err.Error()
				return nil, err
			}
			fmt.Fprintf(logf, "GPU graphics clock locked at %d MHz\n", sr.ClockMHz)
			after = func(rec *RunRecord) string {
				if err := sc.Clocks.Reset(); err != nil {
					rec.Notes = append(rec.Notes, "resetting the GPU clocks: "+err.Error())
				}
				return fmt.Sprintf("GPU at %d MHz (%s %%)", sr.ClockMHz, pct(sr.Allotment))
			}
		case sr.Allotment < 1 && !haveCap:
			err := fmt.Errorf("the cycle's unrestricted run measured nothing: no 100 %% for a %s %% limit", pct(sr.Allotment))
			sr.Error = err.Error()
			return nil, err
		default:
			lim, err := limit(method, group+spec.Dir, pid, sr.Allotment, cp, sc.BaseCores > 0, sr)
			if err != nil {
				sr.Error = err.Error()
				fmt.Fprintf(stderr, "%s (%d of %d): %s %%: %v\n", spec.Dir, i, len(plan), pct(sr.Allotment), err)
				return nil, err
			}
			if rep.Method == "" {
				rep.Method, rep.MethodNote = lim.method, lim.note
			}
			fmt.Fprintf(logf, "cpu %s %% of the server (%s)\n", pct(sr.Allotment), lim.describe(sr))
			smp := startSampler(pid)
			after = func(rec *RunRecord) string {
				var threads []bundle.ThreadUse
				sr.UsedCores, threads = passUse(filepath.Join(out, spec.Dir), smp.stop(), smp.comm)
				lim.finish(sr, rec)
				if lim.warn != "" {
					warns = append(warns, spec.Dir+": "+lim.warn)
				}
				if sr.Allotment == 1 {
					cpus, _ := cpulimit.CPUs(pid) // nil where unread: no cap
					c := capacityOf(sr.UsedCores, threads, len(cpus))
					if sc.BaseCores > 0 {
						// 100 % is a quota here, so the busy threads' run-queue
						// wait holds its throttling too: no contention from it.
						c.cores, c.why, c.ran = sc.BaseCores, "--cpu-base", 1
					}
					sr.BaseCores, sr.BaseWhy, sr.RanWhenRunnable = c.cores, c.why, c.ran
					sr.BusyThreads = busyThreads(threads)
					caps[sr.Cycle] = c
				}
				return lim.describe(sr)
			}
		}
		return func(rec *RunRecord) {
			line := fmt.Sprintf("%s (%d of %d): %s", spec.Dir, i, len(plan), after(rec))
			rec.Extra = map[string]any{"sensitivity": sr}
			if i := slices.IndexFunc(rec.results.Results, func(lr model.LevelResult) bool { return lr.Level == lv.Name }); i >= 0 {
				sr.ThroughputReqS = levelValue(rec.results.Results[i], "requests_per_s") // the mean over the scored passes
			}
			if rec.Error != "" {
				line += ": " + firstLine(rec.Error)
			} else {
				line += fmt.Sprintf(" → %.3f req/s", sr.ThroughputReqS)
				if kind == "cpu" {
					line += fmt.Sprintf(", %.3f cores used", sr.UsedCores)
				}
			}
			if sr.BaseWhy != "" && sr.Allotment == 1 {
				line += "; 100 % = " + capacity{cores: sr.BaseCores, why: sr.BaseWhy}.String()
			}
			fmt.Fprintln(stderr, line)
		}, nil
	}
	rb, runErr := Run(ctx, rc, logf, logf)
	if rb == nil {
		return nil, runErr
	}
	recs := slices.Clone(rb.Runs) // their sides are the summary's, not runbook.json's
	var sides []string
	for i, r := range rb.Runs {
		sr := runs[r.Dir]
		if sr == nil {
			continue
		}
		recs[i].Side, _, _ = strings.Cut(r.Dir, "-")
		if !slices.Contains(sides, recs[i].Side) {
			sides = append(sides, recs[i].Side)
		}
		sr.Error = cmp.Or(sr.Error, r.Error)
		if sc.Stages != nil && r.ran {
			st, err := sc.Stages(ctx, filepath.Join(out, r.Dir))
			if err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: stages: %v", r.Dir, err))
			} else {
				sr.StagesMs = st[lv.Name]
			}
		}
		rep.Runs = append(rep.Runs, *sr)
	}
	rep.Notes = append(rep.Notes, warns...)
	if rep.Method == "" && kind == "cpu" {
		rep.Method = method
	}
	estimate(rep)
	if kind != "cpu" {
		if err := sc.Clocks.Reset(); err != nil {
			rep.Notes = append(rep.Notes, "resetting the GPU clocks: "+err.Error())
		}
	}
	// runbook.json's summary, by allotment (the runbook's own averages
	// every scored run together: 100 % and 50 % alike): the runbook's
	// summary over each allotment's runs apart, each side named after the
	// runs' prefix (cpu100, cpu50).
	rb.Summary = []MetricSummary{}
	for _, side := range sides {
		rb.Summary = append(rb.Summary, Summarize(recs, side, rc.Capture.Levels())...)
	}
	rb.Notes = append(rb.Notes, "asrprof sensitivity: the summary is per allotment (side: the runs' name prefix, e.g. cpu50); see sensitivity.json")
	runErr = cmp.Or(runErr, bundle.WriteJSON(filepath.Join(out, File), rb))
	if runErr != nil {
		rep.Notes = append(rep.Notes, "the runbook did not finish cleanly: "+firstLine(runErr.Error())+" (the full progress: "+filepath.Join(out, SensitivityLog)+")")
	}
	return rep, answer(runErr, filepath.Join(out, bundle.SensitivityFile), rep, SensitivityTables(rep), &rc.Capture, stdout, stderr, "sensitivity")
}

func checkSensitivity(sc *SensitivityConfig) error {
	c := &sc.Runbook.Capture
	if len(c.Levels()) != 1 {
		return fmt.Errorf("%w: sensitivity measures at one level: give one --concurrency or one --rate, not %d", capture.ErrInvalidConfig, len(c.Levels()))
	}
	if c.Search != nil {
		return fmt.Errorf("%w: --find-max does not go with sensitivity (it measures at one level)", capture.ErrInvalidConfig)
	}
	if len(sc.Server.Argv) == 0 {
		return fmt.Errorf("%w: sensitivity starts a fresh server per run: give --server-cmd", ErrBadCommand)
	}
	if sc.Runbook.Lifecycle.Reuse {
		return fmt.Errorf("%w: --reuse-server does not go with sensitivity (each allotment needs a fresh server)", capture.ErrInvalidConfig)
	}
	if len(sc.GPUClocks) > 0 {
		top := slices.Max(sc.GPUClocks)
		if slices.Min(sc.GPUClocks) <= 0 {
			return fmt.Errorf("%w: --gpu-clocks: want clocks in MHz > 0, such as 1980,1500,990", capture.ErrInvalidConfig)
		}
		sc.Allotments = nil
		for _, m := range sc.GPUClocks {
			sc.Allotments = append(sc.Allotments, float64(m)/float64(top))
		}
	}
	if sc.Cycles < 1 {
		return fmt.Errorf("%w: --cycles %d: must be ≥ 1", capture.ErrInvalidConfig, sc.Cycles)
	}
	sc.Method = cmp.Or(sc.Method, MethodAuto)
	if !slices.Contains([]string{MethodAuto, MethodCgroup, MethodAffinity, MethodCoRunner}, sc.Method) {
		return fmt.Errorf("%w: --cpu-method %q: want auto, cgroup, affinity or corunner", capture.ErrInvalidConfig, sc.Method)
	}
	if sc.BaseCores < 0 {
		return fmt.Errorf("%w: --cpu-base %g: want cores > 0", capture.ErrInvalidConfig, sc.BaseCores)
	}
	if sc.Method == MethodCoRunner && sc.BaseCores > 0 && sc.BaseCores != math.Trunc(sc.BaseCores) {
		return fmt.Errorf("%w: --cpu-method corunner pins the server to whole CPUs: --cpu-base %g is not a whole number of cores", capture.ErrInvalidConfig, sc.BaseCores)
	}
	for _, a := range sc.Allotments {
		if !(a > 0 && a <= 1) {
			return fmt.Errorf("%w: --cpu %s %%: want shares in (0, 100] %%", capture.ErrInvalidConfig, pct(a))
		}
	}
	shares := slices.Compact(slices.Sorted(slices.Values(sc.Allotments)))
	slices.Reverse(shares)
	if len(shares) == 0 || shares[0] != 1 {
		shares = append([]float64{1}, shares...)
	}
	if len(shares) < 2 {
		if len(sc.GPUClocks) > 0 {
			return fmt.Errorf("%w: --gpu-clocks needs two clocks or more, such as 1980,990", capture.ErrInvalidConfig)
		}
		return fmt.Errorf("%w: --cpu needs an allotment below 100 %%, such as 100%%,50%%", capture.ErrInvalidConfig)
	}
	sc.Allotments = shares
	return nil
}

// ParseAllotments reads --cpu: "100%,75%,50%" (or shares: 1,0.75,0.5).
func ParseAllotments(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var x float64
		if p, ok := strings.CutSuffix(f, "%"); ok {
			if _, err := fmt.Sscanf(p, "%g", &x); err != nil {
				return nil, fmt.Errorf("--cpu %q: %q is not a percentage", s, f)
			}
			x /= 100
		} else if _, err := fmt.Sscanf(f, "%g", &x); err != nil {
			return nil, fmt.Errorf("--cpu %q: %q: want percentages such as 100%%,50%%", s, f)
		}
		out = append(out, x)
	}
	return out, nil
}

func pct(a float64) string { return fmt.Sprintf("%g", math.Round(a*1000)/10) }

// limiter is how one run's server is held to its allotment.
type limiter struct {
	method, note string
	group        *cpulimit.Group
	spin         *coRunners
	spinStart    float64
	spinAt       time.Time
	spinShare    float64 // the share the spinners' nice leaves the server
	ran          float64 // capacity.ran of the cycle
	warn         string  // a note for the run's record
}

// describe is the run's limit, in words.
func (l *limiter) describe(sr *bundle.SensitivityRun) string {
	base := coresText(sr.BaseCores)
	switch {
	case sr.Allotment == 1 && sr.Quota == 0:
		return "100 %, unrestricted (" + l.method + ")"
	case l.method == cpulimit.Affinity:
		return fmt.Sprintf("%s %% of %s = pinned to %s (affinity)", pct(sr.Allotment), base, countOf(sr.CPUs, "CPU"))
	case l.method == MethodCoRunner:
		s := fmt.Sprintf("%s %% of %s = %s, a spinner beside it on each at nice %d (co-runner", pct(sr.Allotment), base, countOf(sr.CPUs, "CPU"), *sr.CoRunnerNice)
		if sr.CoRunnerCores > 0 {
			s += fmt.Sprintf("; the spinners took %.2f cores", sr.CoRunnerCores)
		}
		return s + ")" + effectiveText(sr)
	}
	s := fmt.Sprintf("%s %% of %s = a quota of %.3f cores (%s", pct(sr.Allotment), base, sr.Quota, l.method)
	if sr.ThrottledS > 0 {
		s += fmt.Sprintf(", throttled %.1f s", sr.ThrottledS)
	}
	return s + ")" + effectiveText(sr)
}

// effectiveText is what the limit left of what the server could get,
// where that is not its allotment.
func effectiveText(sr *bundle.SensitivityRun) string {
	if sr.Effective > 0 && math.Abs(sr.Effective-sr.Allotment) > 0.005 {
		return fmt.Sprintf(", %s %% of what it could get here", pct(sr.Effective))
	}
	return ""
}

// finish ends the limit after the run's capture: the cgroup's throttled
// time and its removal, the spinners' CPU and their end.
func (l *limiter) finish(sr *bundle.SensitivityRun, rec *RunRecord) {
	if l.group != nil {
		if _, us, err := l.group.Throttled(); err == nil {
			sr.ThrottledS = float64(us) / 1e6
		}
		if err := l.group.Remove(); err != nil {
			rec.Notes = append(rec.Notes, err.Error())
		}
	}
	if l.spin != nil {
		if dt := time.Since(l.spinAt).Seconds(); dt > 0 {
			sr.CoRunnerCores = (l.spin.cpuSeconds() - l.spinStart) / dt
		}
		k := float64(len(l.spin.spinners))
		l.spin.stop()
		// What the pinned CPUs gave the server and its spinners, per CPU:
		// a spinner always wants its CPU and gets 1 − share of what the
		// pair gets (more where the server sleeps: at most the CPU). Where
		// the host's other load left those CPUs to them, the server had
		// share of a whole CPU; against the ran of its unrestricted run
		// (held back by that load there), that is more than share.
		if k > 0 && l.spinShare < 1 && sr.CoRunnerCores > 0 {
			per := min(1, sr.CoRunnerCores/k/(1-l.spinShare))
			sr.Effective = min(1, l.spinShare*per/cmp.Or(l.ran, 1)) // ran ≥ 0; 0: unknown
		}
	}
	if l.warn != "" {
		rec.Notes = append(rec.Notes, l.warn)
	}
}

// limit holds the server tree of pid to share of 100 % (c): by a cgroup
// quota of share × c cores, by affinity (share × c CPUs), or by a
// co-runner beside each of c CPUs. fixed: 100 % is --cpu-base, and a quota
// at 100 % too.
func limit(method, name string, pid int, share float64, c capacity, fixed bool, sr *bundle.SensitivityRun) (*limiter, error) {
	switch method {
	case MethodCoRunner:
		if share >= 1 {
			return &limiter{method: MethodCoRunner, note: coRunnerNote}, nil
		}
		return coRunnerLimit(pid, share, c, sr)
	case MethodAffinity:
		cpus, err := cpulimit.CPUs(pid)
		if err != nil {
			return nil, err
		}
		l := &limiter{method: cpulimit.Affinity, note: "sched_setaffinity of every server thread to a share of the CPUs that are 100 %"}
		if share >= 1 {
			return l, nil
		}
		k := int(math.Round(share * c.cores))
		if k < 1 || math.Abs(share*c.cores-float64(k)) > 0.01 || k >= len(cpus) {
			return nil, fmt.Errorf("affinity: %s %% of %s is not a whole number of CPUs, fewer than its %d (use shares such as 50 %% of 2 cores, the cgroup method or the co-runner)", pct(share), coresText(c.cores), len(cpus))
		}
		sr.CPUs, sr.BaseCores, sr.Effective = k, c.cores, float64(k)/c.cores
		if err := cpulimit.PinTree(pid, cpus[:k]); err != nil {
			return nil, err
		}
		return l, nil
	}
	g, err := cpulimit.NewGroup("/sys", name)
	if err != nil {
		return nil, err
	}
	l := &limiter{method: g.Method, group: g, note: "a CFS bandwidth quota on a cgroup holding the server's process tree (" + g.Dir + ")"}
	if err := g.AddTree(pid); err != nil {
		g.Remove()
		return nil, err
	}
	if share < 1 || fixed {
		sr.BaseCores, sr.Quota = c.cores, share*c.cores
		// What the quota leaves of what it could get here: where other
		// load held its threads to a share of their runnable time, its
		// 100 % was that much less.
		sr.Effective = min(1, sr.Quota/(c.cores*cmp.Or(c.ran, 1)))
		if err := g.SetCores(sr.Quota); err != nil {
			g.Remove()
			return nil, err
		}
	}
	return l, nil
}

const coRunnerNote = "a spinning process on each CPU of 100 %, pinned (sched_setaffinity) beside the server's threads at its nice: a thread that computes keeps its share of its core, one that mostly sleeps is barely delayed"

// point is one restricted run against its cycle's unrestricted one.
type point struct {
	cycle int
	share float64
	d, r  float64 // allotment − 1; relative change of the rate
}

// slope is the least-squares slope through the origin of r over d.
func slope(ps []point) (float64, bool) {
	var num, den float64
	for _, p := range ps {
		num += p.d * p.r
		den += p.d * p.d
	}
	if den == 0 {
		return 0, false
	}
	return num / den, true
}

// estimateOf is the slope of the points and its percentile bootstrap
// interval, resampling whole cycles.
func estimateOf(name string, ps []point, conf float64) (bundle.SensitivityEstimate, bool) {
	v, ok := slope(ps)
	if !ok {
		return bundle.SensitivityEstimate{}, false
	}
	byCycle := map[int][]point{}
	var cycles []float64
	for _, p := range ps {
		if _, seen := byCycle[p.cycle]; !seen {
			cycles = append(cycles, float64(p.cycle))
		}
		byCycle[p.cycle] = append(byCycle[p.cycle], p)
	}
	lo, hi, err := stats.BootstrapCI(cycles, func(cs []float64) (float64, error) {
		var sel []point
		for _, c := range cs {
			sel = append(sel, byCycle[int(c)]...)
		}
		s, _ := slope(sel)
		return s, nil
	}, conf, 2000, 1)
	if err != nil {
		return bundle.SensitivityEstimate{}, false
	}
	return bundle.SensitivityEstimate{Name: name, Value: v, Lo: lo, Hi: hi, N: len(cycles)}, true
}

// estimate fills the sensitivities of rep from its runs: each restricted
// run against its cycle's unrestricted run.
func estimate(rep *bundle.SensitivityReport) {
	full := map[int]*bundle.SensitivityRun{}
	for i := range rep.Runs {
		r := &rep.Runs[i]
		if r.Allotment == 1 && r.Error == "" && r.ThroughputReqS > 0 {
			full[r.Cycle] = r
		}
	}
	var tput, recv []point
	stagePts := map[string][]point{}
	small := map[string]bool{}
	var cutNothing []string
	failed := 0
	for _, r := range rep.Runs {
		f := full[r.Cycle]
		if r.Allotment < 1 && r.Error != "" {
			failed++
		}
		if r.Allotment == 1 || f == nil || r.Error != "" || r.ThroughputReqS <= 0 {
			continue
		}
		a := share(r)
		rel := r.ThroughputReqS/f.ThroughputReqS - 1
		if f.UsedCores > 0 && r.UsedCores > 0 {
			recv = append(recv, point{r.Cycle, r.Allotment, r.UsedCores/f.UsedCores - 1, rel})
		}
		if a > 1-minCut {
			cutNothing = append(cutNothing, r.Dir)
			continue
		}
		d := a - 1
		tput = append(tput, point{r.Cycle, r.Allotment, d, rel})
		for st, ms := range r.StagesMs {
			fm := f.StagesMs[st]
			if total := f.StagesMs["total"]; total > 0 && fm < minStageShare*total {
				small[st] = true
				continue
			}
			if fm > 0 && ms > 0 {
				stagePts[st] = append(stagePts[st], point{r.Cycle, r.Allotment, d, fm/ms - 1})
			}
		}
	}
	if len(cutNothing) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("left out, their limit took under %g %% of what the server could get here: %s (a quota above what the host's other load left it)", 100*minCut, strings.Join(cutNothing, ", ")))
	}
	rep.Against = againstOf(rep.Kind, rep.Method)
	rep.Base = baseOf(rep.Runs)
	if rep.Kind == "cpu" {
		var mean float64
		for _, p := range recv {
			mean += p.d / float64(len(recv))
		}
		if e, ok := estimateOf("throughput against the CPU received", recv, rep.Confidence); ok && mean <= -minCut {
			rep.Received = &e
			if e.Value < 0.5 && mean <= -0.2 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("the server received %.0f %% less CPU but its throughput moved %.2f × that: most of the CPU it lost was not its work (a thread that spins while it waits, for a GPU or a lock)", -100*mean, e.Value))
			}
		} else if len(recv) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the CPU the server received fell %.0f %% on average: too little for a slope against it", -100*mean))
		}
	}
	if e, ok := estimateOf("throughput", tput, rep.Confidence); ok {
		rep.Overall = e
	} else if failed > 0 && len(cutNothing) == 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("no restricted run finished (%d failed): no sensitivity", failed))
	} else if len(cutNothing) > 0 {
		rep.Notes = append(rep.Notes, "no restricted run took anything of what the server could get here: no sensitivity (the test cannot bind on this host now; try lower allotments, or the co-runner, whose share is of what the server gets)")
	} else {
		rep.Notes = append(rep.Notes, "no restricted run has an unrestricted run of its cycle to compare with: no sensitivity")
	}
	for _, a := range rep.Allotments[1:] {
		ps := slices.DeleteFunc(slices.Clone(tput), func(p point) bool { return p.share != a })
		name := pct(a) + " %"
		for _, r := range rep.Runs {
			if r.Allotment == a && r.ClockMHz > 0 {
				name = fmt.Sprintf("%d MHz", r.ClockMHz)
			}
		}
		if e, ok := estimateOf(name, ps, rep.Confidence); ok {
			rep.PerAllotment = append(rep.PerAllotment, e)
		}
	}
	for _, st := range slices.Sorted(maps.Keys(stagePts)) {
		if e, ok := estimateOf(st, stagePts[st], rep.Confidence); ok {
			rep.Stages = append(rep.Stages, e)
		}
	}
	if len(small) > 0 {
		why := fmt.Sprintf("a quota stalls work in whole periods of %v, which swamps short stages", cpulimit.Period)
		if rep.Method == MethodCoRunner || rep.Kind != "cpu" {
			why = "their changes are lost in the noise of the longer ones"
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("stages under %g %% of the unrestricted total left out (%s): %s",
			100*minStageShare, strings.Join(slices.Sorted(maps.Keys(small)), ", "), why))
	}
	rep.Verdict = verdictOf(rep.Kind, rep.Overall)
}

// clockOf is the clock of --gpu-clocks whose share of the highest is share.
func clockOf(clocks []int, share float64) int {
	top := slices.Max(clocks)
	for _, m := range clocks {
		if float64(m)/float64(top) == share {
			return m
		}
	}
	return int(math.Round(share * float64(top)))
}

// minCut is the least a restricted run's limit must take of what the
// server could get for the run to count.
const minCut = 0.05

// againstOf says what the slope's x is.
func againstOf(kind, method string) string {
	switch {
	case kind == "gpu-clocks":
		return "the GPU clock, as a share of the highest"
	case method == MethodCoRunner:
		return "the co-runner's share: the share of each of its CPUs a thread that computes keeps"
	case method == cpulimit.Affinity || method == MethodAffinity:
		return "the CPUs allowed, as a share of 100 %"
	}
	return "the quota, as a share of the CPU the server could get"
}

// baseOf is what 100 % was, from the unrestricted runs: "1 core: 1 busy
// thread", or each cycle's where they differ.
func baseOf(runs []bundle.SensitivityRun) string {
	var seen []string
	cycles := map[string][]string{}
	for _, r := range runs {
		if r.Allotment != 1 || r.BaseWhy == "" {
			continue
		}
		t := capacity{cores: r.BaseCores, why: r.BaseWhy}.String()
		if _, ok := cycles[t]; !ok {
			seen = append(seen, t)
		}
		cycles[t] = append(cycles[t], strconv.Itoa(r.Cycle))
	}
	if len(seen) == 1 {
		return seen[0]
	}
	var parts []string
	for _, t := range seen {
		parts = append(parts, fmt.Sprintf("%s (cycle %s)", t, strings.Join(cycles[t], ", ")))
	}
	return strings.Join(parts, "; ")
}

// minStageShare is the smallest share of the total a stage must take in
// the unrestricted run for its sensitivity to be reported.
const minStageShare = 0.05

// verdictWords are a session kind's verdicts: a slope ≥ 0.7, ≤ 0.3, between.
func verdictWords(kind string) (bound, not, partly string) {
	if kind == "gpu-clocks" {
		return "GPU-bound", "not GPU-clock-bound", "partly GPU-clock-bound"
	}
	return "host-bound", "not CPU-bound", "partly CPU-bound"
}

// verdictOf reads a throughput sensitivity: ≈ 1 the server's throughput
// follows its CPU (host-bound), ≈ 0 it does not (GPU- or otherwise bound).
func verdictOf(kind string, e bundle.SensitivityEstimate) string {
	bound, not, partly := verdictWords(kind)
	switch {
	case e.N == 0:
		return "unknown"
	case e.Value >= 0.7:
		return bound
	case e.Value <= 0.3:
		return not
	}
	return partly
}

// SensitivityTables are what `asrprof sensitivity` prints: the answer
// first (its title) with the slopes, then the runs by allotment, then
// each allotment's runs summarised apart.
func SensitivityTables(rep *bundle.SensitivityReport) []*table.Table {
	what := "CPU"
	if rep.Kind == "gpu-clocks" {
		what = "GPU-clock"
	}
	o := rep.Overall
	title := fmt.Sprintf("%s sensitivity at %s: %s", what, model.LevelLabel(rep.Level), rep.Verdict)
	if o.N > 0 {
		title += fmt.Sprintf(", %.2f [%.2f, %.2f] against %s (%g %% bootstrap interval over %d cycles)", o.Value, o.Lo, o.Hi, rep.Against, 100*rep.Confidence, o.N)
	} else {
		title += fmt.Sprintf(": no sensitivity against %s (see the notes)", rep.Against)
	}
	t := &table.Table{Name: "sensitivity", Title: title, Columns: []string{"what", "sensitivity", "interval", "n"}}
	add := func(e bundle.SensitivityEstimate) {
		t.AddRow(e.Name, math.Round(e.Value*1000)/1000, fmt.Sprintf("[%.2f, %.2f]", e.Lo, e.Hi), e.N)
	}
	if o.N > 0 {
		add(o)
	}
	// With one restricted allotment its own slope is the overall one: the
	// row would repeat the first.
	if len(rep.PerAllotment) > 1 || o.N == 0 {
		for _, e := range rep.PerAllotment {
			e.Name = "throughput at " + e.Name
			add(e)
		}
	}
	if rep.Received != nil {
		add(*rep.Received)
	}
	for _, e := range rep.Stages {
		e.Name = "stage " + e.Name
		add(e)
	}
	if rep.Kind == "cpu" && rep.Base != "" {
		n := "100 % = " + rep.Base
		busy := func(r bundle.SensitivityRun) bool { return r.Allotment == 1 && len(r.BusyThreads) > 0 }
		if i := slices.IndexFunc(rep.Runs, busy); i >= 0 {
			var ts []string // "tid 123 (worker) 0.74 cores, runnable-waiting 0.21"
			for _, t := range rep.Runs[i].BusyThreads {
				ts = append(ts, fmt.Sprintf("tid %d (%s) %.2f cores, runnable-waiting %.2f", t.TID, t.Comm, t.Cores, t.WaitCores))
			}
			n += " (" + rep.Runs[i].Dir + ": " + strings.Join(ts, "; ") + ")"
		}
		t.Notes = append(t.Notes, n)
	}
	bound, not, partly := verdictWords(rep.Kind)
	t.Notes = append(t.Notes, fmt.Sprintf("verdict: %s (≥ 0.7 %s, ≤ 0.3 %s, else %s). The slope is the relative change in throughput over the relative change in %s: ≈ 1 throughput follows the %s the server gets, ≈ 0 it does not",
		rep.Verdict, bound, not, partly, rep.Against, strings.ReplaceAll(what, "-", " ")))
	if rep.Received != nil {
		t.Notes = append(t.Notes, fmt.Sprintf("against the CPU the server received instead (its used cores / its 100 %% run's): %.2f [%.2f, %.2f]; ≈ 1 wherever what it lost was work, whatever bounds it", rep.Received.Value, rep.Received.Lo, rep.Received.Hi))
	}
	t.Notes = append(t.Notes, what+" restricted by "+rep.Method+": "+rep.MethodNote)
	t.Notes = append(t.Notes, rep.Notes...)
	return []*table.Table{t, runsTable(rep), allotmentsTable(rep)}
}

func limitText(r bundle.SensitivityRun) string {
	switch {
	case r.Error != "" && r.ThroughputReqS == 0:
		return "failed"
	case r.ClockMHz > 0:
		return fmt.Sprintf("GPU at %d MHz", r.ClockMHz)
	case r.CoRunnerNice != nil:
		return fmt.Sprintf("%s, a spinner each at nice %d", countOf(r.CPUs, "CPU"), *r.CoRunnerNice)
	case r.Quota > 0:
		s := fmt.Sprintf("quota %.3f cores", r.Quota)
		if r.ThrottledS > 0 {
			s += fmt.Sprintf(", throttled %.1f s", r.ThrottledS)
		}
		return s
	case r.Allotment < 1 && r.CPUs > 0:
		return "pinned to " + countOf(r.CPUs, "CPU")
	}
	return "unrestricted"
}

// runsTable keeps every run apart, grouped by allotment.
func runsTable(rep *bundle.SensitivityReport) *table.Table {
	t := &table.Table{Name: "sensitivity_runs", Title: "Runs by allotment (each restricted run against its cycle's 100 % run)",
		Columns: []string{"allotment", "run", "limit", "of what it could get (%)", "cores used", "CPU vs 100 % (%)", "req/s", "req/s vs 100 % (%)"}}
	full := map[int]bundle.SensitivityRun{}
	for _, r := range rep.Runs {
		if r.Allotment == 1 {
			full[r.Cycle] = r
		}
	}
	rel := func(x, base float64) any {
		if base <= 0 || x <= 0 {
			return nil
		}
		return fmt.Sprintf("%+.1f", 100*(x/base-1))
	}
	rs := slices.Clone(rep.Runs) // 100 % first, then each allotment's by cycle
	slices.SortStableFunc(rs, func(a, b bundle.SensitivityRun) int {
		return cmp.Or(cmp.Compare(b.Allotment, a.Allotment), cmp.Compare(a.Cycle, b.Cycle))
	})
	for _, r := range rs {
		f, ok := full[r.Cycle]
		var eff, cpuRel, tRel, used any
		if rep.Kind == "cpu" && limitText(r) != "failed" {
			used = fmt.Sprintf("%.3f", r.UsedCores)
			eff = pct(share(r))
		}
		if ok && r.Allotment < 1 {
			if rep.Kind == "cpu" {
				cpuRel = rel(r.UsedCores, f.UsedCores)
			}
			tRel = rel(r.ThroughputReqS, f.ThroughputReqS)
		}
		t.AddRow(pct(r.Allotment)+" %", r.Dir, limitText(r), eff, used, cpuRel, fmt.Sprintf("%.3f", r.ThroughputReqS), tRel)
		if r.Error != "" {
			t.Notes = append(t.Notes, r.Dir+": "+firstLine(r.Error))
		}
	}
	return t
}

// allotmentsTable summarises each allotment's runs, never across them.
func allotmentsTable(rep *bundle.SensitivityReport) *table.Table {
	t := &table.Table{Name: "sensitivity_allotments", Title: "Each allotment over its cycles (kept apart)",
		Columns: []string{"allotment", "runs", "req/s mean", "req/s min", "req/s max", "cores used mean"}}
	for _, a := range rep.Allotments {
		var xs, us []float64
		for _, r := range rep.Runs {
			if r.Allotment == a && r.Error == "" && r.ThroughputReqS > 0 {
				xs = append(xs, r.ThroughputReqS)
				us = append(us, r.UsedCores)
			}
		}
		if len(xs) == 0 {
			continue
		}
		var used any
		if rep.Kind == "cpu" {
			used = fmt.Sprintf("%.3f", stats.Mean(us))
		}
		r3 := func(x float64) string { return fmt.Sprintf("%.3f", x) }
		t.AddRow(pct(a)+" %", len(xs), r3(stats.Mean(xs)), r3(slices.Min(xs)), r3(slices.Max(xs)), used)
	}
	return t
}

// countOf is n of noun: "1 CPU", "2 CPUs".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
