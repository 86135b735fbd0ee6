package cpu

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"golang.org/x/sys/unix"

	"go.opentelemetry.io/ebpf-profiler/interpreter/interpreterconfig"
	"go.opentelemetry.io/ebpf-profiler/libpf"
	otellog "go.opentelemetry.io/ebpf-profiler/log"
	"go.opentelemetry.io/ebpf-profiler/metrics"
	"go.opentelemetry.io/ebpf-profiler/processmanager"
	"go.opentelemetry.io/ebpf-profiler/reporter/samples"
	"go.opentelemetry.io/ebpf-profiler/times"
	"go.opentelemetry.io/ebpf-profiler/tracer"

	"github.com/asrprof/asrprof/probe"
)

// This file is the only one that imports the OpenTelemetry eBPF profiler
// (go.opentelemetry.io/ebpf-profiler, v0.0.202633). Its API is unstable:
// keep every use of it here.

// Engine names, as Probe.Engine reports them and --cpu-engine takes them.
const (
	EngineAuto = "auto" // OTel where it starts, else the frame-pointer sampler, else perf events
	EngineOTel = "otel"
	EngineFP   = "fp"
	EnginePerf = "perf" // unprivileged perf events, user stacks only (perf.go)
)

// PythonFile is the mapping name of interpreted Python frames in the
// profiles (pprof wants a mapping for every location).
const PythonFile = "[python]"

var _ Adapter = (*OTel)(nil)

// OTel is the engine built on the OpenTelemetry eBPF profiler: it unwinds
// without frame pointers (from .eh_frame), names Python frames (qualified
// function, file, line) by reading CPython's own structures, and names
// kernel and Go frames. Native frames come from the library as file and
// address; OTel names them from the files' ELF symbol tables, as the
// frame-pointer sampler does. Create it with NewOTel.
//
// The library samples every process on the machine and has no PID
// filter: OTel keeps the watched processes' samples and drops the rest
// as they are reported. Samples reach OTel a few hundred milliseconds
// after they are taken (the library polls its maps every 250 ms), so
// Collect waits for the library to catch up and splits samples by the
// time they were taken (see Collect).
//
// At start the library raises RLIMIT_MEMLOCK to unlimited and gives up
// when it may not (no CAP_SYS_RESOURCE and a lower hard limit, as in
// containers that cap it). Start then returns an error wrapping
// probe.ErrNotSupported and EngineAuto falls back to the frame-pointer
// sampler.
type OTel struct {
	mu      sync.Mutex // guards everything below; the library reports from its goroutines
	pids    map[int]bool
	stacks  map[uint64]*otelStack // distinct stacks seen, by hash
	pending []otelSample          // samples of watched processes not yet collected
	begin   int64                 // unix ns: samples taken before it are dropped
	latest  int64                 // unix ns of the newest sample reported, of any process
	dropped uint64                // samples of processes not watched
	maxLag  time.Duration         // the longest a watched sample took to be reported
	seed    maphash.Seed

	trc    *tracer.Tracer
	cancel context.CancelFunc
	done   chan struct{}
	sym    *symbolizer // used by Collect only
	note   string      // what runs degraded, for Probe.Detail
	died   bool        // the library's tracer stopped on an unrecoverable error (guarded by mu)
	// settle bounds how long Collect waits for the library to report the
	// samples taken before it was called (DefaultSettle when zero).
	settle time.Duration
}

// DefaultSettle bounds Collect's wait for late samples. The library
// reads its maps every 250 ms; on the H200 host samples arrived at most
// 248 ms after they were taken.
const DefaultSettle = time.Second

// otelSample is one reported sample: which stack, and when it was taken.
type otelSample struct {
	key uint64
	ts  int64
}

// otelStack is one distinct stack as the library reported it, before
// native frames are named.
type otelStack struct {
	pid, tid int
	comm     string
	frames   libpf.Frames
}

// NewOTel returns an engine that does nothing until Start.
func NewOTel() *OTel {
	return &OTel{pids: map[int]bool{}, stacks: map[uint64]*otelStack{}, seed: maphash.MakeSeed(), begin: time.Now().UnixNano()}
}

var metricsOnce sync.Once

// Start loads the library's BPF programs and starts sampling every CPU
// at hz.
func (o *OTel) Start(ctx context.Context, hz int) (err error) {
	if o.trc != nil {
		return errors.New("otel engine already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The library's first act is raising RLIMIT_MEMLOCK to unlimited, and
	// it gives up when it may not, after reading the kernel's symbols. Try
	// that here first: a machine that forbids it then costs nothing.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err == nil && lim.Max != unix.RLIM_INFINITY {
		inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf); err != nil {
			return otelNotSupported(fmt.Errorf("failed to set memlock rlimit: %w", err))
		}
	}
	metricsOnce.Do(func() {
		metrics.Start(noop.NewMeterProvider().Meter("asrprof"))
		// The library logs at info level to stderr by default, which
		// would interleave with the capture's progress.
		otellog.SetLevel(slog.LevelError)
	})
	runCtx, cancel := context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			cancel()
			if o.trc != nil {
				o.trc.Close()
				o.trc = nil
			}
		}
	}()
	times.StartRealtimeSync(runCtx, 0)
	trc, err := tracer.NewTracer(runCtx, &tracer.Config{
		TraceReporter:          o,
		Intervals:              times.New(5*time.Second, 5*time.Second, time.Minute),
		InterpretersConfig:     interpreterconfig.AllInterpreters(),
		SamplesPerSecond:       hz,
		FrameCacheSize:         processmanager.DefaultFrameCacheSize,
		FilterErrorFrames:      true,
		FilterIdleFrames:       true,
		KernelVersionCheck:     true,
		ProbabilisticInterval:  time.Minute,
		ProbabilisticThreshold: tracer.ProbabilisticThresholdMax,
		BPFFSRoot:              "/sys/fs/bpf/",
	})
	if err != nil {
		if r := otelNotSupported(err); r != err {
			return r
		}
		return fmt.Errorf("loading the tracer: %w", err)
	}
	o.trc = trc
	// Loading cannot be interrupted inside the library; a Start that
	// outlived its context gives up here, before attaching anything.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("loading the tracer took too long: %w", err)
	}
	trc.StartPIDEventProcessor(runCtx)
	if err := trc.AttachTracer(nil); err != nil {
		return fmt.Errorf("attaching to perf events: %w", otelNotSupported(err))
	}
	if err := trc.EnableProfiling(); err != nil {
		return fmt.Errorf("enabling perf events: %w", otelNotSupported(err))
	}
	// The scheduler monitor tells the library when a process exits, so
	// that it frees what it learned about it. It needs a tracefs
	// tracepoint; without one the library frees that state on its own
	// periodic sweep instead, which a capture can live with.
	if err := trc.AttachSchedMonitor(); err != nil {
		o.note = "process exits noticed late: " + err.Error()
	}
	traces := make(chan *libpf.EbpfTrace)
	if err := trc.StartMapMonitors(runCtx, traces); err != nil {
		return fmt.Errorf("starting map monitors: %w", err)
	}
	o.cancel, o.done, o.sym = cancel, make(chan struct{}), newSymbolizer()
	go func() {
		defer close(o.done)
		for {
			select {
			case t := <-traces:
				if t != nil {
					trc.HandleTrace(t)
				}
			case <-trc.Done():
				o.mu.Lock()
				o.died = true
				o.mu.Unlock()
				return
			case <-runCtx.Done():
				return
			}
		}
	}()
	return nil
}

// otelNotSupported marks the library's refusals that mean "this machine
// does not allow it" (permissions, rlimit, kernel) as probe.ErrNotSupported.
func otelNotSupported(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "rlimit") {
		return &plainError{msg: fmt.Sprintf("it raises the memlock limit to unlimited at start, and this process may not "+
			"(%s; needs 'ulimit -l unlimited' or CAP_SYS_RESOURCE)", msg[strings.LastIndex(msg, ": ")+2:]), errs: []error{probe.ErrNotSupported, err}}
	}
	for _, s := range []string{"operation not permitted", "permission denied", "kernel version", "not supported"} {
		if strings.Contains(strings.ToLower(msg), s) {
			return &plainError{msg: msg, errs: []error{probe.ErrNotSupported, err}}
		}
	}
	return err
}

// ReportTraceEvent is called by the library for every sampled stack of
// every process. It keeps the watched processes' on-CPU samples.
func (o *OTel) ReportTraceEvent(t *libpf.Trace, meta *samples.TraceEventMeta) error {
	if meta.ProfileType != nil && meta.ProfileType.SampleType != "samples" {
		return nil // off-CPU or probe events: not asked for
	}
	pid, tid := int(meta.PID), int(meta.TID)
	ts := int64(meta.Timestamp)
	// Most samples on a busy host are other processes': drop them before
	// any work.
	o.mu.Lock()
	o.latest = max(o.latest, ts)
	watched := o.pids[pid]
	if !watched {
		o.dropped++
	}
	o.mu.Unlock()
	if !watched {
		return nil
	}
	comm := meta.Comm.String()
	// The library interns frames, so a frame's handle stands for it.
	var h maphash.Hash
	h.SetSeed(o.seed)
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(pid)<<32|uint64(uint32(tid)))
	h.Write(buf[:])
	h.WriteString(comm)
	for _, f := range t.Frames {
		binary.LittleEndian.PutUint64(buf[:], maphash.Comparable(o.seed, f))
		h.Write(buf[:])
	}
	key := h.Sum64()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.maxLag = max(o.maxLag, time.Duration(time.Now().UnixNano()-ts))
	if ts < o.begin {
		return nil // taken before Reset or the last Collect: reported too late
	}
	if o.stacks[key] == nil {
		o.stacks[key] = &otelStack{pid: pid, tid: tid, comm: comm, frames: append(libpf.Frames(nil), t.Frames...)}
	}
	o.pending = append(o.pending, otelSample{key, ts})
	return nil
}

// Watch replaces the set of processes whose samples are kept.
func (o *OTel) Watch(pids []int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	next := make(map[int]bool, len(pids))
	for _, p := range pids {
		next[p] = true
		if !o.pids[p] && o.sym != nil {
			o.sym.refreshMaps(p)
		}
	}
	o.pids = next
	return nil
}

// Reset drops the samples kept so far, and any taken before now that
// the library has yet to report.
func (o *OTel) Reset(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = o.pending[:0]
	o.begin = time.Now().UnixNano()
	o.dropped = 0
	return nil
}

// Collect returns the samples taken since the last Reset or Collect. The
// library reports samples late, so Collect first waits (up to settle)
// until it has reported one taken after the call, then splits by the
// time each sample was taken: later ones stay for the next Collect.
func (o *OTel) Collect(ctx context.Context) ([]Stack, error) {
	end := time.Now().UnixNano()
	for deadline := time.Now().Add(cmp.Or(o.settle, DefaultSettle)); time.Now().Before(deadline) && ctx.Err() == nil; {
		o.mu.Lock()
		caught := o.latest >= end
		o.mu.Unlock()
		if caught {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.mu.Lock()
	counts := map[uint64]uint64{}
	later := o.pending[:0:0]
	for _, smp := range o.pending {
		if smp.ts >= end {
			later = append(later, smp)
		} else {
			counts[smp.key]++
		}
	}
	o.pending, o.begin = later, end
	kept := make(map[*otelStack]uint64, len(counts))
	for k, n := range counts {
		kept[o.stacks[k]] = n
	}
	if len(o.stacks) > 1<<16 {
		// Forget stacks no pending sample refers to, so that a long
		// capture's map does not grow without bound.
		live := map[uint64]*otelStack{}
		for _, smp := range o.pending {
			live[smp.key] = o.stacks[smp.key]
		}
		o.stacks = live
	}
	pids := slices.Collect(maps.Keys(o.pids))
	died := o.died
	o.mu.Unlock()
	var err error
	if died {
		err = errors.New("the profiler library's tracer stopped on an unrecoverable error: samples since then are missing")
	}
	if o.sym == nil {
		o.sym = newSymbolizer()
	}
	for _, p := range pids {
		o.sym.refreshMaps(p)
	}
	out := make([]Stack, 0, len(kept))
	for st, n := range kept {
		out = append(out, Stack{PID: st.pid, TID: st.tid, Comm: st.comm, Count: n, Frames: o.frames(st.pid, st.frames)})
	}
	return out, err
}

// frames converts the library's frames (leaf first) to ours, naming
// native frames from the ELF symbol tables of the process's files.
func (o *OTel) frames(pid int, fs libpf.Frames) []Frame {
	out := make([]Frame, 0, len(fs))
	for i, h := range fs {
		v := h.Value()
		fr := Frame{Func: v.FunctionName.String(), Addr: uint64(v.AddressOrLineno)}
		var file string
		if v.Mapping.Valid() {
			m := v.Mapping.Value()
			file = m.File.Value().FileName.String()
			fr.Start, fr.Limit, fr.Offset = uint64(m.Start), uint64(m.End), m.FileOffset
		}
		switch {
		case v.Type == libpf.KernelFrame:
			fr.File = KernelFile
			fr.Func = cmp.Or(fr.Func, "[kernel]")
		case v.Type.Interpreter() == libpf.Native:
			fr.File = file
			if fr.Func == "" {
				fr.Func, fr.File = o.sym.native(pid, file, fr.Offset, callSite(i, fr.Addr))
			}
		case v.Type.IsInterpType(libpf.Python):
			fr.File, fr.Source, fr.Line, fr.Addr = PythonFile, v.SourceFile.String(), int(v.SourceLine), 0
			fr.Func = cmp.Or(fr.Func, "[python frame not symbolized]")
		default:
			// Go and other runtimes the library names itself.
			fr.File = cmp.Or(file, "["+v.Type.String()+"]")
			fr.Source, fr.Line = v.SourceFile.String(), int(v.SourceLine)
			if fr.Func == "" {
				fr.Func = fmt.Sprintf("%s+0x%x", fr.File, fr.Addr)
			}
		}
		out = append(out, fr)
	}
	return out
}

// Stop ends sampling and unloads the library's programs.
func (o *OTel) Stop() error {
	if o.trc == nil {
		return nil
	}
	o.cancel()
	o.trc.Close()
	<-o.done
	o.trc = nil
	return nil
}

// Note says what runs degraded ("" when nothing does).
func (o *OTel) Note() string { return o.note }
