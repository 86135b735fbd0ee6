// Package probe defines what every data source that runs beside a capture
// implements (GPU samples, host-CPU stacks, scheduler accounting, CUDA
// launch counts, the server's own /metrics). Each source lives in its own
// sub-package (probe/gpu, probe/cpu, probe/sched, probe/cuda, probe/proc,
// probe/servermetrics); this package imports none of them. The registry
// that lists the probes, says which start under --probes auto and builds
// them from the flags is capture.probeKinds (capture/probes.go); helpers
// the probes share are under internal/.
//
// A probe must not import bench or analysis.
package probe

import (
	"context"
	"errors"
	"time"
)

// ErrNotSupported is wrapped by Start when the probe cannot run on this
// machine (no NVML, no eBPF permission, no libcuda in the target). The
// capture prints the reason in one line and goes on. Any other error from
// Start means the probe failed.
var ErrNotSupported = errors.New("not supported here")

// ErrNoPID is wrapped by Start of a probe that watches the target's
// processes when its pid is unknown (the capture's target line says why).
// It is ErrNotSupported too.
var ErrNoPID error = noPID{}

type noPID struct{}

func (noPID) Error() string     { return "no target pid (the target line says why; --pid names it)" }
func (noPID) Is(err error) bool { return err == ErrNotSupported }

// Target is the process tree being profiled.
type Target struct {
	// PID is the server's main process; 0 when unknown (probes that need a
	// process then return ErrNotSupported).
	PID int
	// Children, when set, is consulted for the current descendants of PID
	// (servers fork schedulers and workers after start).
	Children func() []int
}

// Describer is implemented by probes that can say how they run once
// started (which engine, which fallback). The capture prints the detail
// and keeps it in the manifest.
type Describer interface {
	Detail() string
}

// LossReporter is implemented by probes that can lose data under load
// (events the kernel did not deliver, full maps). Losses says, in one
// line, what was lost since Start and what it affects; "" when nothing
// was. The capture asks before it stops the probe, prints the answer and
// keeps it in the manifest.
type LossReporter interface {
	Losses() string
}

// PeriodCounter is implemented by probes that write whole files instead of
// records (the cpu probe's pprof profiles): how many data points the last
// End wrote. The capture counts appended records for every other probe;
// either way, an "on" probe that recorded nothing in a scored pass is
// reported as a failure.
type PeriodCounter interface {
	PeriodCount() int
}

// ActivityDriven is implemented by probes whose records come from what the
// target does (on-CPU samples, CUDA launches), not from a clock or a poll:
// in a pass where the target hardly ran they may rightly record nothing.
// The capture then checks the target's CPU time over the pass before it
// calls the empty pass a failure. ActivityRate is the records a working
// probe makes, on average, per second of the target's CPU time (the cpu
// probe's sampling rate); 0 when it does not follow the CPU time (CUDA
// launches).
type ActivityDriven interface {
	ActivityRate() float64
}

// PerThreadActivity is implemented by activity-driven probes that may
// sample each thread on its own clock (the cpu probe's perf engine, whose
// events count each thread's CPU time apart): when PerThreadActivity says
// so, a pass in which no single thread ran much may rightly have no
// record, whatever the threads used together. The capture then checks the
// busiest thread's CPU time too.
type PerThreadActivity interface {
	PerThreadActivity() bool
}

// BPFCoster is implemented by probes that run BPF programs of their own:
// the programs' cumulative run time and run count since Start. The run
// time stays zero unless BPF run-time statistics are on
// (doctor.EnableBPFStats; capture --bpf-stats).
type BPFCoster interface {
	BPFCost() (runtime time.Duration, runs uint64, err error)
}

// Period is one pass of the workload (a level and repeat).
type Period struct {
	Level       string `json:"level"`
	Repeat      int    `json:"repeat"`
	Warmup      bool   `json:"warmup"`
	StartUnixNs int64  `json:"start_unix_ns"`
	EndUnixNs   int64  `json:"end_unix_ns"`
}

// Sink is where probes write. It is the capture bundle's writer; it is safe
// for concurrent use.
type Sink interface {
	// Append writes one JSON record as a line of the named bundle file.
	Append(file string, rec any) error
	// Path returns the path of a bundle file, for probes that write whole
	// files (pprof profiles).
	Path(name string) string
}

// Probe is one data source. The capture calls Start once, then Begin and
// End around every pass (from one goroutine, in order), then Stop once.
// Methods other than Start may be called only after Start returned nil.
type Probe interface {
	// Name is the probe's short name as used by --probes (gpu, cpu, sched, cuda, proc, metrics).
	Name() string
	// Start attaches or opens the source. It returns an error wrapping
	// ErrNotSupported when this machine or target can't provide the data.
	Start(ctx context.Context, t Target, out Sink) error
	// Begin marks the start of a pass.
	Begin(p Period)
	// End marks the end of a pass and writes what the probe aggregated for it.
	End(ctx context.Context, p Period) error
	// Stop detaches and flushes. It honours ctx's deadline.
	Stop(ctx context.Context) error
}
