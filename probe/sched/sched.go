package sched

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// File is the bundle file the probe appends to.
const File = bundle.SchedFile

// DefaultRefresh is how often the set of watched processes is updated from
// the target's process tree. Processes forked by a watched process are
// watched at once by the BPF program; the refresh adds the rest
// (Target.Children) and forgets processes that exited.
const DefaultRefresh = 500 * time.Millisecond

var _ probe.Probe = (*Probe)(nil)

// RunqBucketUpperUs is the upper bound of RunqHist bucket k, in µs.
func RunqBucketUpperUs(k int) float64 {
	_, hi := bucketBounds(k)
	return hi
}

// Probe records per-thread scheduler accounting with eBPF. Create it with
// New; it implements probe.Probe.
type Probe struct {
	mu       sync.Mutex // guards everything below after Start
	objs     schedObjects
	links    []link.Link // the seed iterator's included
	seedLink *link.Iter
	target   probe.Target
	out      probe.Sink
	base     snapshot
	loop     *watch.Loop // runs while the probe is started

	// The time bins (sched_bins.jsonl): the binner its ring buffer's
	// reader feeds, and the ring buffer's drop counter at the start of
	// the pass.
	bins     *binner
	ringBase uint64
}

// New returns a probe that does nothing until Start.
func New() *Probe {
	p := &Probe{}
	p.loop = watch.NewLoop(&p.mu, DefaultRefresh, p.refreshLocked)
	return p
}

// Name returns "sched".
func (p *Probe) Name() string { return "sched" }

// Start loads and attaches the BPF programs and starts watching t's
// process tree. It returns an error wrapping probe.ErrNotSupported when
// t.PID is 0, the kernel has no BTF, or loading is not permitted.
func (p *Probe) Start(ctx context.Context, t probe.Target, out probe.Sink) (err error) {
	if t.PID <= 0 {
		return fmt.Errorf("sched: %w", probe.ErrNoPID)
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("sched: kernel BTF: %w (%w)", probe.ErrNotSupported, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loop.Running() {
		return errors.New("sched: already started")
	}
	if err := bpf.Load(&p.objs, loadSchedObjects, "BPF programs"); err != nil {
		return fmt.Errorf("sched: %w", err)
	}
	defer func() {
		if err != nil {
			p.closeLocked()
		}
	}()
	for _, prog := range []*ebpf.Program{p.objs.OnSwitch, p.objs.OnWakeup, p.objs.OnWakeupNew, p.objs.OnFork} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			return fmt.Errorf("sched: attaching %s: %w", prog, bpf.NotSupported(err))
		}
		p.links = append(p.links, l)
	}
	it, err := link.AttachIter(link.IterOptions{Program: p.objs.Seed})
	if err != nil {
		return fmt.Errorf("sched: attaching task iterator: %w", bpf.NotSupported(err))
	}
	p.seedLink, p.links = it, append(p.links, it)
	p.bins = newBinner(bpf.ClockOffset())
	if err := p.bins.Open(p.objs.Events); err != nil {
		return err
	}
	p.target, p.out = t, out
	if err := p.refreshLocked(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.base, err = p.snapshotLocked(); err != nil {
		return err
	}
	p.loop.Start()
	return nil
}

// refreshLocked brings the watch map up to date with the target's process
// tree and seeds entries for threads that have not been switched yet.
func (p *Probe) refreshLocked() error {
	watched, want := make(map[int]bool), watch.Pids(p.target)
	err := bpf.Each(p.objs.Watch, func(k uint32, _ uint8) {
		watched[int(k)] = true
		// Only the dead are dropped: a process reparented away from the
		// tree, or forked too recently for /proc, stays watched.
		if proctree.Alive(int(k)) {
			want = append(want, int(k))
		}
	})
	if err != nil {
		return fmt.Errorf("sched: reading watch map: %w", err)
	}
	added := false
	err = bpf.Watch("sched: ", p.objs.Watch, watched, want, nil, func(int) { added = true })
	if added {
		err = errors.Join(err, p.seedLocked())
	}
	return err
}

// seedLocked runs the task iterator, which creates entries for watched
// threads that have none.
func (p *Probe) seedLocked() error {
	r, err := p.seedLink.Open()
	if err != nil {
		return fmt.Errorf("sched: running task iterator: %w", err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("sched: running task iterator: %w", err)
	}
	return nil
}

// counters is a thread's cumulative accounting at one instant: its map
// entry (times in CLOCK_MONOTONIC ns), its name, its run-queue wait as
// accumulate counts it, and its exit time (its last switch-out) when the
// iterator no longer sees it, else 0.
type counters struct {
	schedTstat
	comm         string
	rqWait, gone uint64
}

type snapshot struct {
	iterAt  uint64 // CLOCK_MONOTONIC ns before the task iterator ran
	mono    uint64 // CLOCK_MONOTONIC ns of the read, for wall_s
	threads map[uint32]counters
}

// Bits of schedTstat.Kflags (K_RUNQ, K_WAITING, K_ONCPU in bpf/sched.bpf.c).
const (
	kRunq    = 1
	kWaiting = 2
	kOnCPU   = 4
)

// accumulate turns a map entry into cumulative counters at time now, for
// a read that ran the task iterator at iterAt. On-CPU time is the
// kernel's se.sum_exec_runtime as the iterator (or the thread's last
// switch-out) copied it, run-queue wait its sched_info.run_delay plus a
// wait in progress: the kernel adds a wait when it ends, so without this
// a starved thread's cpu_s + runq_wait_s would not cover the period. On a
// kernel without sched_info the wait is the events' own sum.
func accumulate(v *schedTstat, now, iterAt uint64) counters {
	c := counters{schedTstat: *v, comm: bpf.Comm(v.Comm[:]), rqWait: v.RunqNs}
	if v.Kflags&kRunq != 0 {
		c.rqWait = v.KernRunqNs
	}
	if v.SeenNs < iterAt {
		c.gone = max(v.LastOut, v.SeenNs)
		return c
	}
	// The wait in progress, measured from the later of the wake-up and the
	// switch-out, so that a stale wake-up time (a missed event) cannot
	// stretch it.
	if v.Kflags&kWaiting != 0 {
		if from := max(v.EnqTs, v.LastOut); from != 0 && now > from {
			c.rqWait += now - from
		}
	}
	return c
}

func (p *Probe) snapshotLocked() (snapshot, error) {
	iterAt := bpf.MonoNow()
	if err := p.seedLocked(); err != nil {
		return snapshot{}, err
	}
	s := snapshot{iterAt: iterAt, mono: bpf.MonoNow(), threads: make(map[uint32]counters)}
	err := bpf.Each(p.objs.Stats, func(tid uint32, v schedTstat) {
		s.threads[tid] = accumulate(&v, bpf.MonoNow(), iterAt)
	})
	if err != nil {
		return s, fmt.Errorf("sched: reading stats map: %w", err)
	}
	return s, nil
}

// diff builds the record of one thread from its counters at the start (b)
// and end (a) of a period that ran from from to to (CLOCK_MONOTONIC ns).
// Off-CPU time is the part of the period the thread was alive (it may
// start or exit inside it) and not on a CPU.
func diff(a, b counters, from, to uint64) bundle.SchedRecord {
	wall := float64(watch.Sub(to, from)) / 1e9
	lo, hi := max(from, a.StartNs), to
	if a.gone != 0 {
		hi = min(hi, a.gone)
	}
	cpu := watch.Sub(a.KernCpuNs, b.KernCpuNs)
	var h [nbuckets]uint64
	for i := range h {
		h[i] = watch.Sub(a.Hist[i], b.Hist[i])
	}
	r := bundle.SchedRecord{
		CPUSec:  float64(cpu) / 1e9,
		WallSec: wall,
		SchedRunq: &bundle.SchedRunq{
			OffCPUSec: float64(watch.Sub(watch.Sub(hi, lo), cpu)) / 1e9,
			RunqP50us: quantile(h[:], 0.5),
			RunqP99us: quantile(h[:], 0.99),
			RunqCount: watch.Sub(a.RunqCount, b.RunqCount),
		},
		RunqWaitSec: float64(watch.Sub(a.rqWait, b.rqWait)) / 1e9,
		Voluntary:   watch.Sub(a.Voluntary, b.Voluntary),
		Involuntary: watch.Sub(a.Involuntary, b.Involuntary),
		Source:      "ebpf",
	}
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	if n > 0 {
		r.RunqHist = slices.Clone(h[:n])
	}
	if wall > 0 {
		r.Utilization = r.CPUSec / wall
	}
	return r
}

// Begin takes the baseline of the period and opens its time bins, from
// per.StartUnixNs (now when zero).
func (p *Probe) Begin(per probe.Period) {
	p.mu.Lock()
	defer p.mu.Unlock()
	watch.Baseline(p.loop, &p.base, p.snapshotLocked) // an error is reported by End
	if !p.loop.Running() {
		return
	}
	p.bins.Begin(per)
	p.ringBase, _ = p.ringDroppedLocked() // an error is reported by End
}

// End writes one bundle.SchedRecord per watched thread seen since Begin (threads that
// exited during the period included) to sched.jsonl and one bundle.ThreadBins per
// thread that ran or waited for a CPU in it to sched_bins.jsonl, then
// forgets threads that have exited. The bins end at per.EndUnixNs (now
// when zero). The next period starts where this one ends unless Begin is
// called. It returns the first error the background refresh met since the
// last End.
func (p *Probe) End(ctx context.Context, per probe.Period) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return errors.New("sched: End before Start")
	}
	err := p.loop.TakeErr()
	cur, serr := p.snapshotLocked()
	if serr != nil {
		return errors.Join(err, serr)
	}
	tids := watch.ThreadOrder(cur.threads, func(c counters) int { return int(c.Tgid) })
	for _, tid := range tids {
		a := cur.threads[tid]
		r := diff(a, p.base.threads[tid], p.base.mono, cur.mono)
		r.Level, r.Repeat, r.Warmup = per.Level, per.Repeat, per.Warmup
		r.PID, r.TID = int(a.Tgid), int(tid)
		r.Name = cmp.Or(proctree.Comm(r.PID, r.TID), a.comm) // exited: the name the BPF program saw last
		if werr := watch.Append(ctx, p.out, "sched", File, r); werr != nil {
			return errors.Join(err, werr)
		}
	}
	err = errors.Join(err, p.endBinsLocked(ctx, per, cur), bpf.ForgetThreads("sched", p.objs.Stats, cur.threads, func(tid uint32, a counters) (any, uint32, bool) {
		return tid, tid, !proctree.Alive(int(a.Tgid)) || proctree.Comm(int(a.Tgid), int(tid)) == ""
	}))
	p.base = cur
	return err
}

// Stop detaches the programs and frees the maps. It waits for the refresh
// goroutine until ctx is done.
func (p *Probe) Stop(ctx context.Context) error {
	return p.loop.Close(ctx, "sched", p.closeLocked)
}

func (p *Probe) closeLocked() error {
	err := bpf.Close(p.links, p.bins, &p.objs)
	p.links, p.seedLink, p.objs = nil, nil, schedObjects{}
	return err
}

// Overhead is the CPU time the probe's BPF programs have used.
type Overhead struct {
	// Runtime is the sum over the programs; zero unless BPF statistics are
	// enabled (ebpf.EnableStats or sysctl kernel.bpf_stats_enabled=1).
	Runtime time.Duration
	// Runs is how many times they ran.
	Runs uint64
	// Dropped counts events lost because the per-thread map was full.
	Dropped uint64
	// Missed counts runs the kernel skipped because a program was already
	// running on that CPU (recursion_misses). Missed events cost switch
	// counts and histogram entries, not CPU time or run-queue wait, which
	// come from the kernel's own counters.
	Missed uint64
	// RingDropped counts intervals for the time bins lost because the
	// ring buffer was full; BinsDropped those left out of a pass's bins
	// because the pass was over bins.MaxBinThreads threads or bins.MaxPassBins bins.
	RingDropped, BinsDropped uint64
}

// BPFCost returns the BPF programs' run time and runs since Start.
func (p *Probe) BPFCost() (time.Duration, uint64, error) {
	o, err := p.Overhead()
	return o.Runtime, o.Runs, err
}

// Losses says how many scheduler events were missed or dropped since
// Start, and what that affects; "" when none were.
func (p *Probe) Losses() string {
	o, err := p.Overhead()
	if err != nil {
		return ""
	}
	var say []string
	if o.Missed+o.Dropped > 0 {
		say = append(say, fmt.Sprintf("%d scheduler events skipped by the kernel (a BPF program already running on that CPU) and %d dropped (thread map full): "+
			"switch counts and run-queue percentiles undercount by as much; cpu_s and runq_wait_s are the kernel's own counters and stay right",
			o.Missed, o.Dropped))
	}
	if o.RingDropped+o.BinsDropped > 0 {
		say = append(say, fmt.Sprintf("%d on-CPU/run-queue intervals lost to a full ring buffer and %d beyond a pass's %d threads or %d min of bins: "+
			"%s undercounts by as much (dropped_events says which passes)",
			o.RingDropped, o.BinsDropped, bins.MaxBinThreads, bins.MaxPassBins*bins.BinMs/60000, BinsFile))
	}
	return strings.Join(say, "; ")
}

// Overhead returns the cumulative cost of the BPF programs since Start.
func (p *Probe) Overhead() (Overhead, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return Overhead{}, errors.New("sched: not started")
	}
	var o Overhead
	for _, prog := range []*ebpf.Program{p.objs.OnSwitch, p.objs.OnWakeup, p.objs.OnWakeupNew, p.objs.OnFork, p.objs.Seed} {
		st, err := prog.Stats()
		if err != nil {
			return o, fmt.Errorf("sched: program stats: %w", err)
		}
		o.Runtime += st.Runtime
		o.Runs += st.RunCount
		o.Missed += st.RecursionMisses
	}
	if err := bpf.Counters(p.objs.Dropped, &o.Dropped); err != nil {
		return o, fmt.Errorf("sched: reading drop counter: %w", err)
	}
	ring, err := p.ringDroppedLocked()
	if err != nil {
		return o, err
	}
	o.RingDropped = ring
	o.BinsDropped, _ = p.bins.Totals()
	return o, nil
}
