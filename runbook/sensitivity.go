package runbook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/table"
	"github.com/asrprof/asrprof/trace/bundle"
)

// SensitivityFile is asrprof sensitivity's result at the top of its --out
// (the diagnosis of any of its runs reads it from there).
const SensitivityFile = "sensitivity.json"

// Ways of restricting the server's CPU (--cpu-method).
const (
	MethodAuto     = "auto"
	MethodCgroup   = "cgroup"
	MethodAffinity = "affinity"
)

// SensitivityConfig is an `asrprof sensitivity` session: the runbook of
// every run (its Capture holds one level; its Plan is made here), the
// server, the CPU allotments and how many cycles of them.
type SensitivityConfig struct {
	Runbook Config
	Server  ServerCmd
	// Allotments are shares of the server's CPU (1 = unrestricted, 0.5 =
	// half); 1 is run first in each cycle, added when missing.
	Allotments []float64
	// Cycles is how many times every allotment runs, each with a fresh
	// server: the repeats the intervals are taken over.
	Cycles int
	Method string // MethodAuto, MethodCgroup or MethodAffinity
	// BaseCores, when > 0, is what 100 % means for the cgroup methods, in
	// cores (100 % is then a quota too); 0: the CPU the server used in its
	// cycle's unrestricted run, over the scored passes.
	BaseCores float64
	// Stages reads a run's per-stage mean durations (ms) at each level
	// (nil: no per-stage sensitivity); asrprof passes the stage table of
	// the analysis.
	Stages func(ctx context.Context, dir string) (map[string]map[string]float64, error)
	// Sys is the sysfs root ("": /sys).
	Sys string
	// GPUClocks, when set, makes it a GPU-clock session: the runs lock
	// every GPU's graphics clock at each of these MHz (the highest is
	// 100 %) instead of restricting the CPU; Clocks locks them (nil: NVML).
	GPUClocks []int
	Clocks    ClockLocker
}

// SensitivityRun is one run's limit and what it measured.
type SensitivityRun struct {
	Dir       string  `json:"dir"`
	Cycle     int     `json:"cycle"`
	Allotment float64 `json:"allotment"`
	// Quota is the CFS quota in cores (cgroup methods), CPUs the number of
	// CPUs allowed (affinity); BaseCores the server's CPU use measured in
	// the cycle's unrestricted run, the 100 % the quota is a share of.
	Quota     float64 `json:"quota_cores,omitempty"`
	ClockMHz  int     `json:"gpu_clock_mhz,omitempty"` // GPU-clock sessions
	CPUs      int     `json:"cpus,omitempty"`
	BaseCores float64 `json:"base_cores,omitempty"`
	// UsedCores is the server tree's CPU time over the scored passes /
	// their wall time.
	UsedCores      float64            `json:"used_cores"`
	ThrottledS     float64            `json:"throttled_s,omitempty"`
	ThroughputReqS float64            `json:"throughput_req_s"`
	StagesMs       map[string]float64 `json:"stages_ms,omitempty"`
	Error          string             `json:"error,omitempty"`
}

// Estimate is a sensitivity with its bootstrap interval over the cycles.
type Estimate struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	N     int     `json:"n"` // cycles it is taken over
}

// SensitivityReport is sensitivity.json.
type SensitivityReport struct {
	Schema     string           `json:"schema"`
	Kind       string           `json:"kind"` // "cpu" or "gpu-clocks"
	Method     string           `json:"method"`
	MethodNote string           `json:"method_note"`
	Level      string           `json:"level"`
	Allotments []float64        `json:"allotments"`
	Cycles     int              `json:"cycles"`
	Runs       []SensitivityRun `json:"runs"`
	// Overall is the throughput's: the least-squares slope through the
	// origin of (throughput / the cycle's unrestricted throughput − 1)
	// over (allotment − 1); PerAllotment the same at each allotment;
	// Stages each stage's, its rate being 1 / its mean duration.
	Overall      Estimate   `json:"overall"`
	PerAllotment []Estimate `json:"per_allotment"`
	Stages       []Estimate `json:"stages,omitempty"`
	Verdict      string     `json:"verdict"`
	Confidence   float64    `json:"confidence"`
	Notes        []string   `json:"notes,omitempty"`
}

// Sensitivity runs the allotments, each cycle with a fresh server per
// allotment, and reports how throughput and each stage follow the CPU
// the server gets. Progress, each run's tables and the runbook's own
// summary go to stderr; the sensitivity table to stdout in the capture's
// --format; sensitivity.json and runbook.json to the top of --out.
func Sensitivity(ctx context.Context, sc SensitivityConfig, stdout, stderr io.Writer) (*SensitivityReport, error) {
	if err := checkSensitivity(&sc); err != nil {
		return nil, err
	}
	sys := sc.Sys
	if sys == "" {
		sys = "/sys"
	}
	lv := sc.Runbook.Capture.Levels()[0]
	kind := "cpu"
	if len(sc.GPUClocks) > 0 {
		kind = "gpu-clocks"
		if sc.Clocks == nil {
			sc.Clocks = NVMLClocks(nil)
		}
		// Before any server starts: can the clocks be locked here at all?
		if err := sc.Clocks.Reset(); err != nil {
			return nil, fmt.Errorf("--gpu-clocks: %w", err)
		}
	}
	rep := &SensitivityReport{Schema: Schema, Kind: kind, Level: lv.Name, Allotments: sc.Allotments, Cycles: sc.Cycles, Confidence: 0.95, Runs: []SensitivityRun{}}
	type key struct {
		cycle int
		share float64
	}
	runOf := map[string]key{}
	var plan []RunSpec
	for c := 1; c <= sc.Cycles; c++ {
		for _, a := range sc.Allotments {
			name := fmt.Sprintf("cpu%s-%d", pct(a), c)
			if kind != "cpu" {
				name = fmt.Sprintf("gpu%dmhz-%d", clockOf(sc.GPUClocks, a), c)
			}
			plan = append(plan, RunSpec{Name: name, Scored: true, Dir: name, Server: sc.Server})
			runOf[name] = key{c, a}
		}
	}
	var tag [3]byte
	rand.Read(tag[:])
	var mu sync.Mutex
	base := map[int]float64{} // cycle → the unrestricted run's CPU use (cores)
	runs := map[string]*SensitivityRun{}
	rc := sc.Runbook
	rc.Plan = plan
	rc.Around = func(spec RunSpec, pid int) (func(*RunRecord), error) {
		k := runOf[spec.Dir]
		sr := &SensitivityRun{Dir: spec.Dir, Cycle: k.cycle, Allotment: k.share}
		mu.Lock()
		runs[spec.Dir] = sr
		b := base[k.cycle]
		mu.Unlock()
		if sc.BaseCores > 0 {
			b = sc.BaseCores
		}
		if kind != "cpu" {
			return lockClock(sc, rep, sr, clockOf(sc.GPUClocks, k.share), stderr)
		}
		lim, err := limit(sc.Method, sys, "asrprof-"+hex.EncodeToString(tag[:])+"-"+spec.Dir, pid, k.share, b, sr)
		if err != nil {
			sr.Error = err.Error()
			return nil, err
		}
		mu.Lock()
		if rep.Method == "" {
			rep.Method, rep.MethodNote = lim.method, lim.note
		}
		mu.Unlock()
		fmt.Fprintf(stderr, "cpu %s of the server (%s)\n", pct(k.share)+" %", lim.describe(sr))
		smp := startSampler(pid)
		return func(rec *RunRecord) {
			samples := smp.stop()
			sr.UsedCores = passCores(filepath.Join(rc.Capture.Out, spec.Dir), samples)
			if lim.group != nil {
				if _, us, err := lim.group.Throttled(); err == nil {
					sr.ThrottledS = float64(us) / 1e6
				}
				if err := lim.group.Remove(); err != nil {
					rec.Notes = append(rec.Notes, err.Error())
				}
			}
			if k.share == 1 && sc.BaseCores == 0 {
				mu.Lock()
				base[k.cycle] = sr.UsedCores
				mu.Unlock()
			}
			rec.Extra = map[string]any{"sensitivity": sr}
		}, nil
	}
	rb, runErr := Run(ctx, rc, stderr, stderr)
	if rb == nil {
		return nil, runErr
	}
	for _, r := range rb.Runs {
		sr := runs[r.Dir]
		if sr == nil {
			continue
		}
		if r.Error != "" && sr.Error == "" {
			sr.Error = r.Error
		}
		for _, lr := range r.results.Results {
			if lr.Level == lv.Name {
				sr.ThroughputReqS = meanReqPerS(lr.PerRepeat)
			}
		}
		if sc.Stages != nil && r.ran {
			st, err := sc.Stages(ctx, filepath.Join(rc.Capture.Out, r.Dir))
			if err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: stages: %v", r.Dir, err))
			} else {
				sr.StagesMs = st[lv.Name]
			}
		}
		rep.Runs = append(rep.Runs, *sr)
	}
	estimate(rep)
	if kind != "cpu" {
		if err := sc.Clocks.Reset(); err != nil {
			rep.Notes = append(rep.Notes, "resetting the GPU clocks: "+err.Error())
		}
	}
	if runErr != nil {
		rep.Notes = append(rep.Notes, "the runbook did not finish cleanly: "+runErr.Error())
	}
	if err := writeJSON(filepath.Join(rc.Capture.Out, SensitivityFile), rep); err != nil && runErr == nil {
		runErr = err
	}
	if err := table.Render(stdout, rc.Capture.Format, SensitivityTable(rep)); err != nil && runErr == nil {
		runErr = err
	}
	fmt.Fprintf(stderr, "sensitivity: %s\n", filepath.Join(rc.Capture.Out, SensitivityFile))
	return rep, runErr
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
	switch sc.Method {
	case "", MethodAuto:
		sc.Method = MethodAuto
	case MethodCgroup, MethodAffinity:
	default:
		return fmt.Errorf("%w: --cpu-method %q: want auto, cgroup or affinity", capture.ErrInvalidConfig, sc.Method)
	}
	var shares []float64
	for _, a := range sc.Allotments {
		if !(a > 0 && a <= 1) {
			return fmt.Errorf("%w: --cpu %s %%: want shares in (0, 100] %%", capture.ErrInvalidConfig, pct(a))
		}
		if !slices.Contains(shares, a) {
			shares = append(shares, a)
		}
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(shares)))
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
}

func (l *limiter) describe(sr *SensitivityRun) string {
	switch {
	case sr.Allotment == 1 && sr.Quota == 0:
		return l.method + ", unrestricted: measuring its CPU use"
	case l.method == cpulimit.Affinity:
		return fmt.Sprintf("%s: %d CPUs", l.method, sr.CPUs)
	}
	return fmt.Sprintf("%s: %.3f cores = %s %% of %.3f cores", l.method, sr.Quota, pct(sr.Allotment), sr.BaseCores)
}

// limit restricts the server tree of pid to share of its CPU: by cgroup
// quota (share × base cores, base measured in the cycle's unrestricted
// run), or by affinity (share × its CPUs, rounded).
func limit(method, sys, name string, pid int, share, base float64, sr *SensitivityRun) (*limiter, error) {
	if method != MethodAffinity {
		g, err := cpulimit.NewGroup(sys, name)
		switch {
		case err == nil:
			l := &limiter{method: g.Method, group: g, note: "a CFS bandwidth quota on a cgroup holding the server's process tree (" + g.Dir + ")"}
			if err := g.AddTree(pid); err != nil {
				g.Remove()
				return nil, err
			}
			if share < 1 || base > 0 {
				if base <= 0 {
					g.Remove()
					return nil, fmt.Errorf("the cycle's unrestricted run measured no CPU use: no base for a %s %% quota", pct(share))
				}
				sr.BaseCores, sr.Quota = base, share*base
				if err := g.SetCores(sr.Quota); err != nil {
					g.Remove()
					return nil, err
				}
			}
			return l, nil
		case method == MethodCgroup || !errors.Is(err, cpulimit.ErrNotSupported):
			return nil, err
		}
		// auto: fall back to affinity
		method = MethodAffinity
	}
	cpus, err := cpulimit.CPUs(pid)
	if err != nil {
		return nil, err
	}
	l := &limiter{method: cpulimit.Affinity, note: fmt.Sprintf("sched_setaffinity of every server thread to a share of its %d CPUs", len(cpus))}
	sr.CPUs = len(cpus)
	if share < 1 {
		k := int(math.Round(share * float64(len(cpus))))
		if k < 1 || k == len(cpus) {
			return nil, fmt.Errorf("affinity: %s %% of %d CPUs is not a whole number of CPUs fewer than %d (use shares such as 50%% of 2 CPUs, or a cgroup)", pct(share), len(cpus), len(cpus))
		}
		sr.CPUs = k
		if err := cpulimit.PinTree(pid, cpus[:k]); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// cpuSample is the server tree's CPU seconds at a moment.
type cpuSample struct {
	at  time.Time
	cpu float64
}

type sampler struct {
	stopc chan struct{}
	done  chan []cpuSample
}

// startSampler reads the tree's CPU time every 100 ms until stop.
func startSampler(pid int) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan []cpuSample, 1)}
	go func() {
		var out []cpuSample
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			out = append(out, cpuSample{time.Now(), cpulimit.TreeCPUSeconds(pid)})
			select {
			case <-s.stopc:
				s.done <- out
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() []cpuSample {
	close(s.stopc)
	return <-s.done
}

// passCores is the tree's CPU use over the scored passes of the bundle in
// dir: CPU seconds between their starts and ends (interpolated between
// samples) over their wall time.
func passCores(dir string, samples []cpuSample) float64 {
	b, err := bundle.Open(dir)
	if err != nil || len(samples) < 2 {
		return 0
	}
	at := func(ns int64) float64 {
		t := time.Unix(0, ns)
		i := sort.Search(len(samples), func(i int) bool { return !samples[i].at.Before(t) })
		switch {
		case i == 0:
			return samples[0].cpu
		case i == len(samples):
			return samples[len(samples)-1].cpu
		}
		a, z := samples[i-1], samples[i]
		f := float64(t.Sub(a.at)) / float64(z.at.Sub(a.at))
		return a.cpu + f*(z.cpu-a.cpu)
	}
	var cpu, wall float64
	for _, l := range b.Manifest.Levels {
		if l.Warmup || l.EndUnixNs <= l.StartUnixNs {
			continue
		}
		cpu += at(l.EndUnixNs) - at(l.StartUnixNs)
		wall += float64(l.EndUnixNs-l.StartUnixNs) / 1e9
	}
	if wall == 0 {
		return 0
	}
	return cpu / wall
}

func meanReqPerS(ps []model.PassMetrics) float64 {
	var s float64
	for _, p := range ps {
		s += p.RequestsPerS
	}
	if len(ps) == 0 {
		return 0
	}
	return s / float64(len(ps))
}

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
func estimateOf(name string, ps []point, conf float64) (Estimate, bool) {
	v, ok := slope(ps)
	if !ok {
		return Estimate{}, false
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
		return Estimate{}, false
	}
	return Estimate{Name: name, Value: v, Lo: lo, Hi: hi, N: len(cycles)}, true
}

// estimate fills the sensitivities of rep from its runs: each restricted
// run against its cycle's unrestricted run.
func estimate(rep *SensitivityReport) {
	full := map[int]*SensitivityRun{}
	for i := range rep.Runs {
		r := &rep.Runs[i]
		if r.Allotment == 1 && r.Error == "" && r.ThroughputReqS > 0 {
			full[r.Cycle] = r
		}
	}
	var tput []point
	stagePts := map[string][]point{}
	small := map[string]bool{}
	for _, r := range rep.Runs {
		f := full[r.Cycle]
		if r.Allotment == 1 || f == nil || r.Error != "" || r.ThroughputReqS <= 0 {
			continue
		}
		d := r.Allotment - 1
		tput = append(tput, point{r.Cycle, r.Allotment, d, r.ThroughputReqS/f.ThroughputReqS - 1})
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
	if e, ok := estimateOf("throughput", tput, rep.Confidence); ok {
		rep.Overall = e
	} else {
		rep.Notes = append(rep.Notes, "no restricted run has an unrestricted run of its cycle to compare with: no sensitivity")
	}
	for _, a := range rep.Allotments[1:] {
		var ps []point
		for _, p := range tput {
			if p.share == a {
				ps = append(ps, p)
			}
		}
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
	for _, st := range slices.Sorted(mapsKeys(stagePts)) {
		if e, ok := estimateOf(st, stagePts[st], rep.Confidence); ok {
			rep.Stages = append(rep.Stages, e)
		}
	}
	if len(small) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("stages under %g %% of the unrestricted total left out (%s): a quota stalls work in whole periods of %v, which swamps short stages",
			100*minStageShare, strings.Join(slices.Sorted(func(y func(string) bool) {
				for k := range small {
					if !y(k) {
						return
					}
				}
			}), ", "), cpulimit.Period))
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

// lockClock holds every GPU at mhz for one run and gives the clocks back
// after its capture.
func lockClock(sc SensitivityConfig, rep *SensitivityReport, sr *SensitivityRun, mhz int, stderr io.Writer) (func(*RunRecord), error) {
	sr.ClockMHz = mhz
	rep.Method, rep.MethodNote = "nvml locked clocks", "nvmlDeviceSetGpuLockedClocks(min = max = the run's clock) on every GPU, reset after each run"
	if err := sc.Clocks.Lock(mhz); err != nil {
		sr.Error = err.Error()
		return nil, err
	}
	fmt.Fprintf(stderr, "GPU graphics clock locked at %d MHz\n", mhz)
	return func(rec *RunRecord) {
		if err := sc.Clocks.Reset(); err != nil {
			rec.Notes = append(rec.Notes, "resetting the GPU clocks: "+err.Error())
		}
		rec.Extra = map[string]any{"sensitivity": sr}
	}, nil
}

// minStageShare is the smallest share of the total a stage must take in
// the unrestricted run for its sensitivity to be reported.
const minStageShare = 0.05

func mapsKeys(m map[string][]point) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// verdictOf reads a throughput sensitivity: ≈ 1 the server's throughput
// follows its CPU (host-bound), ≈ 0 it does not (GPU- or otherwise bound).
func verdictOf(kind string, e Estimate) string {
	bound, not, partly := "host-bound", "not CPU-bound", "partly CPU-bound"
	if kind == "gpu-clocks" {
		bound, not, partly = "GPU-bound", "not GPU-clock-bound", "partly GPU-clock-bound"
	}
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

// SensitivityTable is the table `asrprof sensitivity` prints.
func SensitivityTable(rep *SensitivityReport) *table.Table {
	what := "CPU"
	if rep.Kind == "gpu-clocks" {
		what = "GPU-clock"
	}
	t := &table.Table{Name: "sensitivity", Title: fmt.Sprintf(what+" sensitivity at %s (relative change in rate / relative change in CPU; %g %% bootstrap interval over %d cycles)", rep.Level, 100*rep.Confidence, rep.Overall.N),
		Columns: []string{"what", "sensitivity", "interval", "n"}}
	add := func(e Estimate) {
		t.AddRow(e.Name, math.Round(e.Value*1000)/1000, fmt.Sprintf("[%.2f, %.2f]", e.Lo, e.Hi), e.N)
	}
	if rep.Overall.N > 0 {
		add(rep.Overall)
	}
	for _, e := range rep.PerAllotment {
		e.Name = "throughput at " + e.Name
		add(e)
	}
	for _, e := range rep.Stages {
		e.Name = "stage " + e.Name
		add(e)
	}
	t.Notes = append(t.Notes, fmt.Sprintf("verdict: %s (≈ 1: throughput follows the %s the server gets; ≈ 0: it does not)", rep.Verdict, what))
	t.Notes = append(t.Notes, what+" restricted by "+rep.Method+": "+rep.MethodNote)
	for _, r := range rep.Runs {
		line := fmt.Sprintf("%s: %s %% CPU, used %.3f cores, %.3f req/s", r.Dir, pct(r.Allotment), r.UsedCores, r.ThroughputReqS)
		if r.ClockMHz > 0 {
			line = fmt.Sprintf("%s: GPU at %d MHz (%s %%), %.3f req/s", r.Dir, r.ClockMHz, pct(r.Allotment), r.ThroughputReqS)
		}
		if r.Quota > 0 {
			line += fmt.Sprintf(", quota %.3f cores (throttled %.1f s)", r.Quota, r.ThrottledS)
		}
		if r.Error != "" {
			line += ": " + r.Error
		}
		t.Notes = append(t.Notes, line)
	}
	t.Notes = append(t.Notes, rep.Notes...)
	return t
}
