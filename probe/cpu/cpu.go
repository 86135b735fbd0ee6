package cpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// Dir is the bundle folder the probe writes its profiles to.
const Dir = "cpu"

// DefaultHz is Config.Hz's default; DefaultRefresh is how often the set of
// sampled processes is updated from the target's process tree.
const (
	DefaultHz      = 99
	DefaultRefresh = 500 * time.Millisecond
)

var _ probe.Probe = (*Probe)(nil)

// Config configures a Probe.
type Config struct {
	// Hz is the sampling frequency per CPU (DefaultHz when zero).
	Hz int
	// Engine picks the engine when Adapter is nil: EngineOTel (the
	// OpenTelemetry eBPF profiler, Python frames named), EngineFP (the
	// frame-pointer sampler), EnginePerf (perf events without BPF, user
	// stacks only; needs no root) or EngineAuto (""; OTel where this
	// machine lets it start, else the frame-pointer sampler, else perf
	// events).
	Engine string
	// Adapter, when set, is the engine that samples stacks (tests).
	Adapter Adapter
}

// Adapter is the seam between the probe and the engine that samples
// stacks. The probe calls Start once, then Watch (from a background
// goroutine), Reset and Collect, then Stop; never two at once.
type Adapter interface {
	// Start begins sampling at hz samples per second per CPU. It returns
	// an error wrapping probe.ErrNotSupported when this machine does not
	// allow it.
	Start(ctx context.Context, hz int) error
	// Watch replaces the set of processes (tgids) whose threads are
	// sampled.
	Watch(pids []int) error
	// Reset drops what was sampled so far.
	Reset(ctx context.Context) error
	// Collect returns the stacks sampled since Start, the last Reset or
	// the last Collect, symbolized, and starts afresh. On error it may
	// return the stacks it could read.
	Collect(ctx context.Context) ([]Stack, error)
	// Stop ends sampling and frees what Start took.
	Stop() error
}

// Stack is one distinct sampled stack of one thread and how many samples
// hit it.
type Stack struct {
	PID, TID int
	Comm     string // the thread's name when sampled
	Count    uint64
	// Frames, leaf first: kernel frames (if the sample was taken in the
	// kernel), then user frames.
	Frames []Frame
}

// Frame is one symbolized stack frame.
type Frame struct {
	// Func is the function's symbol name (mangled as in the symbol
	// table: pprof demangles C++ names when it shows them), or a
	// placeholder such as "libfoo.so+0x1234" when no symbol covers the
	// address.
	Func string
	// Addr is the sampled address in the process's (or the kernel's)
	// address space: the program counter for the leaf, return addresses
	// for the others.
	Addr uint64
	// File is the mapped file the address lies in ("[kernel.kallsyms]"
	// for the kernel); Start, Limit and Offset describe the mapping.
	File                 string
	Start, Limit, Offset uint64
	// Source and Line name the source of an interpreted frame (a Python
	// function's file and line; File is then PythonFile) when the engine
	// knows them.
	Source string
	Line   int
}

// Probe samples on-CPU stacks of the target's process tree and writes
// one pprof profile per period. Create it with New; it implements
// probe.Probe.
type Probe struct {
	cfg Config

	mu     sync.Mutex // guards everything below after Start
	eng    Adapter
	detail string // which engine runs, and why
	target probe.Target
	out    probe.Sink
	begin  time.Time
	loop   *watch.Loop // runs while the probe is started

	lastCount int // samples in the profile the last End wrote
}

// New returns a probe that does nothing until Start.
func New(cfg Config) *Probe {
	cfg.Hz = cmp.Or(max(cfg.Hz, 0), DefaultHz)
	p := &Probe{cfg: cfg}
	p.loop = watch.NewLoop(&p.mu, DefaultRefresh, p.refreshLocked)
	return p
}

// Name returns "cpu".
func (p *Probe) Name() string { return "cpu" }

// ActivityRate is the sampling rate: the probe's records are the target's
// on-CPU samples, Hz a second of its CPU time, and an idle target gives
// none (probe.ActivityDriven).
func (p *Probe) ActivityRate() float64 { return float64(p.cfg.Hz) }

// PerThreadActivity reports whether the perf engine runs: its events
// sample each thread on the thread's own CPU clock, so a thread needs a
// sampling period of its own CPU time to be sampled
// (probe.PerThreadActivity).
func (p *Probe) PerThreadActivity() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.eng.(*Perf)
	return ok
}

// Start starts sampling t's process tree. It returns an error wrapping
// probe.ErrNotSupported when t.PID is 0 or the engine is not permitted
// here (no root, perf_event_paranoid, no BPF).
func (p *Probe) Start(ctx context.Context, t probe.Target, out probe.Sink) error {
	if t.PID <= 0 {
		return fmt.Errorf("cpu: %w", probe.ErrNoPID)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loop.Running() {
		return errors.New("cpu: already started")
	}
	eng, detail, bpfErr, err := p.startEngine(ctx)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	switch eng.(type) {
	case *Sampler, *Perf: // frame-pointer walks: Python functions only from a perf map
		if h := perfSupportHint(t.PID); h != "" {
			detail += "; " + h
		}
	}
	p.eng, p.detail, p.target, p.out = eng, detail, t, out
	if err := p.refreshLocked(); err != nil {
		if bpfErr != nil && errors.Is(err, probe.ErrNotSupported) {
			// Auto mode fell back to perf events, which may not sample
			// the target either: say why nothing can.
			err = fmt.Errorf("cpu: %w", cannotSample(bpfErr, err, os.Geteuid()))
		}
		return errors.Join(err, eng.Stop())
	}
	p.begin = time.Now()
	p.loop.Start()
	return nil
}

// startEngine starts the engine Config asks for. In auto mode an OTel
// engine that does not start is replaced by the frame-pointer sampler,
// and that, when it does not start either, by the perf engine; the
// detail says why, and bpfErr is then the frame-pointer sampler's error.
// When the perf engine cannot start either, the error says in one line
// why nothing can sample (cannotSample).
func (p *Probe) startEngine(ctx context.Context) (eng Adapter, detail string, bpfErr, err error) {
	if a := p.cfg.Adapter; a != nil {
		return a, "", nil, a.Start(ctx, p.cfg.Hz)
	}
	switch p.cfg.Engine {
	case EngineFP:
		s := NewSampler()
		return s, fpDetail, nil, s.Start(ctx, p.cfg.Hz)
	case EngineOTel:
		o := NewOTel()
		err := o.Start(ctx, p.cfg.Hz)
		return o, otelDetail(o), nil, err
	case EnginePerf:
		e := NewPerf()
		return e, perfDetail, nil, e.Start(ctx, p.cfg.Hz)
	case "", EngineAuto:
		o := NewOTel()
		oerr := o.Start(ctx, p.cfg.Hz)
		if oerr == nil {
			return o, otelDetail(o), nil, nil
		}
		// Any failure of the preferred engine falls back: the
		// frame-pointer sampler still gives native stacks.
		otelWhy := "otel engine " + why(oerr)
		s := NewSampler()
		serr := s.Start(ctx, p.cfg.Hz)
		if serr == nil {
			return s, fpDetail + "; " + otelWhy, nil, nil
		}
		// Without eBPF (no root), perf events still give user stacks of
		// our own processes.
		e := NewPerf()
		if perr := e.Start(ctx, p.cfg.Hz); perr != nil {
			return nil, "", nil, cannotSample(serr, perr, os.Geteuid())
		}
		return e, perfDetail + "; " + otelWhy + "; fp engine " + why(serr), serr, nil
	}
	return nil, "", nil, fmt.Errorf("unknown engine %q (want %s, %s, %s or %s)", p.cfg.Engine, EngineAuto, EngineOTel, EngineFP, EnginePerf)
}

// why says why an engine that auto mode passed over did not start.
func why(err error) string {
	if errors.Is(err, probe.ErrNotSupported) {
		return "not allowed here: " + err.Error()
	}
	return "did not start: " + err.Error()
}

// fpDetail is the frame-pointer sampler's line in Probe.Detail.
const fpDetail = "engine fp (frame-pointer sampler: native frames, and Python functions of CPython ≥ 3.12 run with PYTHONPERFSUPPORT=1)"

// otelDetail is the OTel engine's line in Probe.Detail.
func otelDetail(o *OTel) string {
	d := "engine otel (OpenTelemetry eBPF profiler, Python frames named)"
	if n := o.Note(); n != "" {
		d += "; " + n
	}
	return d
}

// Detail says which engine runs and, in auto mode, why the preferred one
// does not; "" before Start.
func (p *Probe) Detail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detail
}

// refreshLocked gives the engine the target's current process tree.
func (p *Probe) refreshLocked() error {
	if err := p.eng.Watch(watch.Pids(p.target)); err != nil {
		return fmt.Errorf("cpu: watching processes: %w", err)
	}
	return nil
}

// Begin drops the samples taken before the period.
func (p *Probe) Begin(per probe.Period) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return
	}
	p.loop.Keep(p.eng.Reset(context.Background())) // reported by End
	p.begin = time.Now()
}

// End writes the samples taken since Begin (or the previous End) as the
// pprof profile cpu/<level>-<repeat>.pb.gz (cpu/<level>-warmup.pb.gz for
// a warm-up). A period without samples still gets a profile, with no
// samples. It returns the first error the background refresh met since
// the last End, joined with its own.
func (p *Probe) End(ctx context.Context, per probe.Period) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return errors.New("cpu: End before Start")
	}
	err := p.loop.TakeErr()
	stacks, cerr := p.eng.Collect(ctx)
	if cerr != nil {
		err = errors.Join(err, fmt.Errorf("cpu: collecting stacks: %w", cerr))
	}
	end := time.Now()
	prof := BuildProfile(stacks, per, p.cfg.Hz, p.begin, end)
	p.begin = end
	p.lastCount = 0
	for _, st := range stacks {
		p.lastCount += int(st.Count)
	}
	name := p.out.Path(filepath.Join(Dir, FileName(per)))
	werr := os.MkdirAll(filepath.Dir(name), 0o755)
	if werr == nil {
		werr = bundle.WriteFileAtomic(name, prof.Write)
	}
	if werr != nil {
		err = errors.Join(err, fmt.Errorf("cpu: writing %s: %w", name, werr))
	}
	return err
}

// Stop ends sampling. It waits for the refresh goroutine until ctx is
// done.
func (p *Probe) Stop(ctx context.Context) error {
	return p.loop.Close(ctx, "cpu", func() error { return p.eng.Stop() })
}

// BPFCost returns the frame-pointer engine's BPF run time and runs since
// Start; the otel engine does not report them (probe.ErrNotSupported).
func (p *Probe) BPFCost() (time.Duration, uint64, error) {
	o, err := p.Overhead()
	return o.Runtime, o.Runs, err
}

// Losses says how many samples the frame-pointer engine lost or kept
// without their user stack since Start, or what the perf engine could not
// sample (samples lost, threads left out); "" when none (or for the otel
// engine, which does not count them).
//
// After them it names the files whose frames were left as file+0xoffset,
// with why (stripped, no debug file installed for its build-id...).
func (p *Probe) Losses() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := ""
	if l, ok := p.eng.(interface{ Losses() string }); ok && p.loop.Running() {
		msg = l.Losses()
	}
	if u, ok := p.eng.(interface{ Unnamed() string }); ok {
		if un := u.Unnamed(); un != "" {
			msg = strings.TrimPrefix(msg+"; frames left unnamed: "+un, "; ")
		}
	}
	return msg
}

// Overhead returns the engine's cost since Start when the engine reports
// it (the frame-pointer sampler does).
func (p *Probe) Overhead() (Overhead, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return Overhead{}, errors.New("cpu: not started")
	}
	o, ok := p.eng.(interface{ Overhead() (Overhead, error) })
	if !ok {
		return Overhead{}, fmt.Errorf("cpu: engine reports no overhead: %w", probe.ErrNotSupported)
	}
	return o.Overhead()
}

// PeriodCount is the number of samples the last End wrote to its profile
// (probe.PeriodCounter).
func (p *Probe) PeriodCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastCount
}

// FileName returns the profile's name inside Dir for a period:
// "<level>-<repeat>.pb.gz", or "<level>-warmup.pb.gz". Characters other
// than letters, digits, '.', '_' and '-' in the level become '_'.
func FileName(per probe.Period) string {
	level := cmp.Or(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, per.Level), "all")
	if per.Warmup {
		return level + "-warmup.pb.gz"
	}
	return level + "-" + strconv.Itoa(per.Repeat) + ".pb.gz"
}

// BuildProfile turns sampled stacks into a pprof profile of the period
// [begin, end] sampled at hz: sample types samples/count and
// cpu/nanoseconds (count × 1/hz), string labels pid, tid, thread and
// level.
func BuildProfile(stacks []Stack, per probe.Period, hz int, begin, end time.Time) *profile.Profile {
	period := int64(time.Second) / int64(max(hz, 1))
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "samples", Unit: "count"},
			{Type: "cpu", Unit: "nanoseconds"},
		},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        period,
		TimeNanos:     begin.UnixNano(),
		DurationNanos: end.Sub(begin).Nanoseconds(),
		Comments:      []string{"asrprof cpu probe: on-CPU samples at " + strconv.Itoa(hz) + " Hz per CPU"},
	}
	type mkey struct {
		file                 string
		start, limit, offset uint64
	}
	type lkey struct {
		m    mkey
		addr uint64
		fn   string
		src  string
		line int
	}
	type fkey struct{ name, src string }
	mappings := make(map[mkey]*profile.Mapping)
	funcs := make(map[fkey]*profile.Function)
	locs := make(map[lkey]*profile.Location)
	for _, st := range stacks {
		s := &profile.Sample{
			Value: []int64{int64(st.Count), int64(st.Count) * period},
			Label: map[string][]string{
				"pid":    {strconv.Itoa(st.PID)},
				"tid":    {strconv.Itoa(st.TID)},
				"thread": {st.Comm},
				"level":  {per.Level},
			},
		}
		for _, f := range st.Frames {
			mk := mkey{f.File, f.Start, f.Limit, f.Offset}
			m := intern(mappings, &prof.Mapping, mk, func(id uint64) *profile.Mapping {
				return &profile.Mapping{ID: id, File: f.File, Start: f.Start, Limit: f.Limit, Offset: f.Offset, HasFunctions: true}
			})
			fn := intern(funcs, &prof.Function, fkey{f.Func, f.Source}, func(id uint64) *profile.Function {
				return &profile.Function{ID: id, Name: f.Func, SystemName: f.Func, Filename: f.Source}
			})
			if f.Line > 0 || f.Source != "" {
				m.HasFilenames, m.HasLineNumbers = true, f.Line > 0
			}
			s.Location = append(s.Location, intern(locs, &prof.Location, lkey{mk, f.Addr, f.Func, f.Source, f.Line}, func(id uint64) *profile.Location {
				return &profile.Location{ID: id, Mapping: m, Address: f.Addr, Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
			}))
		}
		prof.Sample = append(prof.Sample, s)
	}
	// pprof takes the first mapping for the main binary: put the kernel
	// and pseudo-mappings last.
	sort.SliceStable(prof.Mapping, func(i, j int) bool {
		return !strings.HasPrefix(prof.Mapping[i].File, "[") && strings.HasPrefix(prof.Mapping[j].File, "[")
	})
	for i, m := range prof.Mapping {
		m.ID = uint64(i + 1)
	}
	return prof
}

// intern returns byKey[k], made first by mk with the next ID of all and
// appended to it.
func intern[K comparable, V any](byKey map[K]*V, all *[]*V, k K, mk func(id uint64) *V) *V {
	v := byKey[k]
	if v == nil {
		v = mk(uint64(len(*all) + 1))
		byKey[k] = v
		*all = append(*all, v)
	}
	return v
}
