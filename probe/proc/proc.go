package proc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// File is the bundle file the probe appends to (shared with probe/sched).
const File = bundle.SchedFile

// DefaultHz is the sampling rate when Config.Hz is zero.
const DefaultHz = 10

var (
	_ probe.Probe        = (*Probe)(nil)
	_ probe.Describer    = (*Probe)(nil)
	_ probe.LossReporter = (*Probe)(nil)
)

// Config configures a Probe.
type Config struct {
	// Hz is how often threads are sampled between Begin and End (DefaultHz
	// when zero). It also sets how often the process tree is refreshed.
	Hz float64
	// CoresOnly makes the probe the "cores" probe: it writes the per-core
	// record (CPUsFile) alone, with no per-thread records and no time
	// bins. capture starts it beside the eBPF sched probe, which writes
	// those, so that the co-tenant check has its cores there too.
	CoresOnly bool
}

// Switches are the context-switch counters of /proc/PID/task/TID/status.
type Switches struct {
	Voluntary, Involuntary uint64
}

// ParseStatus returns the context-switch counters in the text of a status
// file.
func ParseStatus(s string) (Switches, error) {
	var sw Switches
	for _, f := range []struct {
		key string
		dst *uint64
	}{{"voluntary_ctxt_switches", &sw.Voluntary}, {"nonvoluntary_ctxt_switches", &sw.Involuntary}} {
		v, ok := proctree.StatusField(s, f.key)
		if !ok {
			return sw, errors.New("parsing status: no ctxt_switches lines")
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return sw, fmt.Errorf("parsing status %s: %w", f.key, err)
		}
		*f.dst = n
	}
	return sw, nil
}

// sample is one thread's cumulative counters.
type sample struct {
	pid    int
	name   string
	cpuNs  uint64
	waitNs uint64
	sw     Switches
	// startTicks is when the thread started, in clock ticks (USER_HZ)
	// since boot (stat field 22).
	startTicks uint64
	// core is the core it last ran on (stat field 39; -1 unread).
	core int
}

// readThread reads one thread's counters, using buf for the file
// contents. useSchedstat says whether the kernel fills schedstat.
func readThread(pid, tid int, useSchedstat bool, buf []byte) (sample, error) {
	s, err := readThreadCPU(pid, tid, useSchedstat, buf)
	if err != nil {
		return s, err
	}
	b, err := proctree.ReadSmall("/proc/"+strconv.Itoa(pid)+"/task/"+strconv.Itoa(tid)+"/status", buf)
	if err != nil {
		return s, err
	}
	s.sw, err = ParseStatus(string(b))
	return s, err
}

// readThreadCPU reads one thread's CPU counters and its core (stat and
// schedstat; no switches).
func readThreadCPU(pid, tid int, useSchedstat bool, buf []byte) (sample, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/"
	s := sample{pid: pid, core: -1}
	b, err := proctree.ReadSmall(dir+"stat", buf)
	if err != nil {
		return s, err
	}
	st, err := proctree.ParseStat(string(b))
	if err != nil {
		return s, err
	}
	s.name, s.startTicks, s.core = st.Comm, st.Start, st.Processor
	s.cpuNs = (st.Utime + st.Stime) * (1e9 / proctree.UserHZ)
	if useSchedstat {
		if b, err := proctree.ReadSmall(dir+"schedstat", buf); err == nil {
			if ss, err := proctree.ParseSchedstat(string(b)); err == nil {
				s.cpuNs, s.waitNs = ss.RunNs, ss.WaitNs
			}
		}
	}
	return s, nil
}

// Probe samples per-thread CPU accounting from /proc. Create it with New;
// it implements probe.Probe.
type Probe struct {
	cfg Config

	mu           sync.Mutex // guards everything below after Start
	target       probe.Target
	out          probe.Sink
	useSchedstat bool
	pids         []int     // the target's processes, as of treeAt
	treeAt       time.Time // when pids was read
	buf          []byte
	bins         *binner        // the time bins' sampler; nil when schedstat is off
	binsOff      string         // why there are no time bins, when bins is nil after Start
	last         map[int]sample // latest sample of every thread seen since the last End
	base         map[int]sample
	baseAt       time.Time
	loop         *watch.Loop // samples while the probe is started
	cores        cores       // the per-core record of the period (cpus.go)
}

// New returns a probe that does nothing until Start.
func New(cfg Config) *Probe {
	cfg.Hz = cmp.Or(max(cfg.Hz, 0), DefaultHz)
	p := &Probe{cfg: cfg}
	p.loop = watch.NewLoop(&p.mu, time.Duration(float64(time.Second)/cfg.Hz), func() error {
		p.sampleLocked(time.Since(p.treeAt) >= treeRefresh)
		return nil
	})
	return p
}

// Name returns "proc", or "cores" with Config.CoresOnly.
func (p *Probe) Name() string {
	if p.cfg.CoresOnly {
		return "cores"
	}
	return "proc"
}

// Start takes a first sample of t's threads and starts sampling: the
// totals at Config.Hz and, where the kernel fills schedstat, the time bins
// every DefaultBinMs (Detail says which). It returns an error wrapping
// probe.ErrNotSupported when t.PID is 0 or /proc is not mounted.
func (p *Probe) Start(ctx context.Context, t probe.Target, out probe.Sink) error {
	if t.PID <= 0 {
		return fmt.Errorf("proc: %w", probe.ErrNoPID)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return fmt.Errorf("proc: /proc not readable: %w (%w)", probe.ErrNotSupported, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(t.PID)); err != nil {
		return fmt.Errorf("proc: target %d: %w", t.PID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loop.Running() {
		return errors.New("proc: already started")
	}
	// schedstat reads "0 0 N" for every task when the kernel's sched_info
	// is off; this process's main thread has surely run, so zero means off.
	ss, err := proctree.ReadSchedstat(os.Getpid(), os.Getpid())
	p.useSchedstat = err == nil && ss.RunNs > 0
	p.bins, p.binsOff = nil, ""
	if p.cfg.CoresOnly {
		p.binsOff = "per-core time and the busiest other processes (" + CPUsFile + ") for the co-tenant check"
	} else if p.useSchedstat {
		p.bins = newBinner(DefaultBinMs)
	} else {
		p.binsOff = "no time bins (" + BinsFile + "): schedstat reads zeros on this kernel (sched_info off)"
	}
	p.target, p.out = t, out
	p.buf = make([]byte, 16<<10)
	p.last = make(map[int]sample)
	p.cores = cores{selfPID: os.Getpid(), target: map[int]uint64{}, self: map[int]uint64{}}
	p.base, p.baseAt = p.sampleLocked(true), time.Now()
	p.cores.begin(p.pids, p.buf)
	if err := ctx.Err(); err != nil {
		if p.bins != nil {
			_ = p.bins.close(context.Background()) // the fast loop is not running: closes the files only
			p.bins = nil
		}
		return err
	}
	p.loop.Start()
	if p.bins != nil {
		p.bins.start()
	}
	return nil
}

// treeRefresh is how often the periodic samples re-read the process tree
// (a walk of all of /proc); Begin and End always do.
const treeRefresh = 500 * time.Millisecond

// sampleLocked reads every live thread of the target's tree (re-read first
// when tree is set), stores the values in p.last and returns them, and
// hands the threads to the time bins' sampler. Threads that vanish while it
// reads are skipped.
func (p *Probe) sampleLocked(tree bool) map[int]sample {
	listed := time.Now()
	if tree || p.pids == nil {
		p.pids = watch.Pids(p.target)
		p.treeAt = time.Now()
	}
	now := make(map[int]sample)
	for _, pid := range slices.Compact(slices.Sorted(slices.Values(p.pids))) {
		for _, tid := range proctree.Threads(pid) {
			read := readThread
			if p.cfg.CoresOnly {
				read = readThreadCPU // the cores need no switches
			}
			s, err := read(pid, tid, p.useSchedstat, p.buf)
			if err != nil {
				continue // exited meanwhile
			}
			prev, seen := p.last[tid]
			attribute(p.cores.target, prev, s, seen)
			now[tid] = s
			p.last[tid] = s
		}
	}
	p.cores.sampleSelf(p.useSchedstat, p.buf)
	if p.bins != nil {
		p.bins.sync(now, listed)
	}
	return now
}

// Begin takes the baseline of the period and opens its time bins, from
// per.StartUnixNs (now when zero).
func (p *Probe) Begin(per probe.Period) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return
	}
	if p.bins != nil {
		p.bins.begin(cmp.Or(per.StartUnixNs, p.bins.now()))
	}
	p.last = make(map[int]sample) // forget threads that exited before the period
	p.base, p.baseAt = p.sampleLocked(true), time.Now()
	p.cores.begin(p.pids, p.buf)
}

// End writes one bundle.SchedRecord per thread seen since Begin (including threads
// that exited, with their last sampled values) and starts the next period
// from here. Then, unless schedstat is off, it writes the period's time
// bins (endBinsLocked), waiting up to one bin for the last to be over.
func (p *Probe) End(ctx context.Context, per probe.Period) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return errors.New("proc: End before Start")
	}
	alive := p.sampleLocked(true)
	at := time.Now()
	wall := at.Sub(p.baseAt).Seconds()
	var tids []int
	if !p.cfg.CoresOnly {
		tids = watch.ThreadOrder(p.last, func(s sample) int { return s.pid })
	}
	for _, tid := range tids {
		a, b := p.last[tid], p.base[tid]
		if b.pid != 0 && b.pid != a.pid {
			b = sample{} // tid reused by another process
		}
		r := bundle.SchedRecord{
			Level: per.Level, Repeat: per.Repeat, Warmup: per.Warmup,
			PID: a.pid, TID: tid, Name: a.name,
			CPUSec:      float64(watch.Sub(a.cpuNs, b.cpuNs)) / 1e9,
			WallSec:     wall,
			RunqWaitSec: float64(watch.Sub(a.waitNs, b.waitNs)) / 1e9,
			Voluntary:   watch.Sub(a.sw.Voluntary, b.sw.Voluntary),
			Involuntary: watch.Sub(a.sw.Involuntary, b.sw.Involuntary),
			Source:      "proc",
		}
		if wall > 0 {
			r.Utilization = r.CPUSec / wall
		}
		if err := watch.Append(ctx, p.out, "proc", File, r); err != nil {
			return err
		}
	}
	for _, r := range p.cores.end(p.pids, per.Level, per.Repeat, per.Warmup, wall, p.buf) {
		if err := p.out.Append(CPUsFile, r); err != nil {
			return fmt.Errorf("proc: writing %s: %w", CPUsFile, err)
		}
	}
	p.cores.begin(p.pids, p.buf) // the next period starts here unless Begin says otherwise
	p.last = maps.Clone(alive)
	p.base, p.baseAt = alive, at // the next period starts here unless Begin says otherwise
	if p.bins == nil {
		return nil
	}
	return p.endBinsLocked(ctx, per)
}

// Detail says whether the probe writes time bins, and if not, why.
func (p *Probe) Detail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bins == nil {
		return p.binsOff
	}
	return fmt.Sprintf("time bins of %d ms from schedstat (%s)", DefaultBinMs, BinsFile)
}

// Losses says how many thread samples the time bins lost to their bounds
// since Start; "" when none.
func (p *Probe) Losses() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bins == nil {
		return ""
	}
	if n := p.bins.losses(); n > 0 {
		return fmt.Sprintf("%d thread samples not binned in %s (over %d threads, %v a pass or %d threads sampled)",
			n, BinsFile, MaxBinThreads, MaxPassDuration, MaxSampledThreads)
	}
	return ""
}

// Stop ends sampling; it waits for the samplers until ctx is done.
func (p *Probe) Stop(ctx context.Context) error {
	return p.loop.Close(ctx, "proc", func() error {
		if p.bins == nil {
			return nil
		}
		return p.bins.close(ctx)
	})
}
