package cuda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// File is the bundle file the probe appends to.
const File = bundle.CUDAFile

// DefaultLibPattern is the shell pattern (path.Match) matched against the
// base name of every file mapped by the target's processes to find the
// CUDA driver library; DefaultRefresh is how often the watched processes
// and their libraries are updated from the target's process tree.
const (
	DefaultLibPattern = "libcuda.so*"
	DefaultRefresh    = 500 * time.Millisecond
)

// DefaultSymbols are the driver functions counted: kernel launches
// (cuLaunchKernelEx is what cuBLAS and recent runtimes use) and CUDA-graph
// replays. A symbol the library lacks is skipped; Start fails when it has
// none of these and of DefaultSyncSymbols.
var DefaultSymbols = []string{"cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch"}

var (
	_ probe.Probe        = (*Probe)(nil)
	_ probe.LossReporter = (*Probe)(nil)
	_ probe.Describer    = (*Probe)(nil)
)

// Probe counts CUDA driver calls per thread with uprobes. Create it with
// New; it implements probe.Probe.
type Probe struct {
	mu      sync.Mutex // guards everything below after Start
	objs    cudaObjects
	links   []link.Link
	libs    map[libKey]string // attached libraries → the path used
	cuda    map[int]bool      // processes known to map the library
	watched map[int]bool
	target  probe.Target
	out     probe.Sink
	base    snapshot
	loop    *watch.Loop // runs while the probe is started

	// The time bins (cuda_bins.jsonl): the binner its ring buffer's
	// reader feeds, and the BPF counters at the start of the pass.
	bins     *binner
	syncBase syncStats
	// Functions attached, over the libraries (for Detail).
	nlaunch, nsync int
}

// New returns a probe that does nothing until Start.
func New() *Probe {
	p := &Probe{}
	p.loop = watch.NewLoop(&p.mu, DefaultRefresh, p.refreshLocked)
	return p
}

// Name returns "cuda".
func (p *Probe) Name() string { return "cuda" }

// ActivityRate is 0: the probe's records are the target's CUDA launches,
// which do not follow its CPU time, and an idle target gives none
// (probe.ActivityDriven).
func (p *Probe) ActivityRate() float64 { return 0 }

// Detail says what the probe attached to: how many launch functions it
// counts and how many blocking functions it times, in which libraries.
func (p *Probe) Detail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("counting %d launch functions, timing %d blocking calls, in %s", p.nlaunch, p.nsync, strings.Join(p.libPaths(), ", "))
}

// libKey names a mapped file by device and inode: one uprobe per
// function covers every process that maps it.
type libKey struct {
	dev   string
	inode uint64
}

// lib is one mapped file that matches the pattern.
type lib struct {
	key  libKey
	path string // as mapped, inside the process's root
}

// findLibs returns the files mapped executable in the text of
// /proc/PID/maps whose base name matches pattern.
func findLibs(r io.Reader, pattern string) ([]lib, error) {
	ms, err := proctree.ParseMaps(r)
	if err != nil {
		return nil, err
	}
	seen := make(map[libKey]bool)
	var out []lib
	for _, m := range ms {
		ok, err := path.Match(pattern, path.Base(m.Path))
		if err != nil {
			return nil, fmt.Errorf("library pattern %q: %w", pattern, err)
		}
		if k := (libKey{m.Dev, m.Inode}); ok && strings.HasPrefix(m.Path, "/") && !seen[k] {
			seen[k] = true
			out = append(out, lib{key: k, path: m.Path})
		}
	}
	return out, nil
}

// libsOf returns the matching libraries mapped by pid.
func (p *Probe) libsOf(pid int) ([]lib, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	if err != nil {
		return nil, nil // gone
	}
	defer f.Close()
	return findLibs(f, DefaultLibPattern)
}

// Start finds the CUDA driver library in the target's processes, loads
// the BPF program and attaches a uprobe to each function. It returns an
// error wrapping probe.ErrNotSupported when t.PID is 0, no process of the
// tree maps a library matching DefaultLibPattern, or uprobes are not
// permitted.
func (p *Probe) Start(ctx context.Context, t probe.Target, out probe.Sink) (err error) {
	if t.PID <= 0 {
		return fmt.Errorf("cuda: %w", probe.ErrNoPID)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loop.Running() {
		return errors.New("cuda: already started")
	}
	p.target, p.out = t, out
	p.libs, p.cuda, p.watched = make(map[libKey]string), make(map[int]bool), make(map[int]bool)
	found := false
	for _, pid := range watch.Pids(p.target) {
		libs, err := p.libsOf(pid)
		if err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		found = found || len(libs) > 0
	}
	if !found {
		return fmt.Errorf("cuda: no %s mapped by process %d or its descendants: %w", DefaultLibPattern, t.PID, probe.ErrNotSupported)
	}
	if err := bpf.Load(&p.objs, loadCudaObjects, "BPF program"); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.closeLocked())
		}
	}()
	p.bins = newBinner(bpf.ClockOffset())
	if err := p.bins.Open(p.objs.Events); err != nil {
		return err
	}
	if err := p.refreshLocked(); err != nil {
		return err
	}
	if len(p.links) == 0 {
		return fmt.Errorf("cuda: none of %v found in %v: %w", slices.Concat(DefaultSymbols, DefaultSyncSymbols), p.libPaths(), probe.ErrNotSupported)
	}
	if p.syncBase, err = p.syncStatsLocked(); err != nil {
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

func (p *Probe) libPaths() []string { return slices.Sorted(maps.Values(p.libs)) }

// refreshLocked brings the watch map up to date with the target's process
// tree and attaches to libraries that processes mapped since the last
// call. A process is scanned until it is seen to map the library (servers
// load the driver when CUDA is first used).
func (p *Probe) refreshLocked() error {
	want := watch.Pids(p.target)
	var errs []error
	for _, pid := range want {
		if p.cuda[pid] {
			continue
		}
		libs, err := p.libsOf(pid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range libs {
			p.cuda[pid] = true
			if _, ok := p.libs[l.key]; ok {
				continue
			}
			host := filepath.Join("/proc", strconv.Itoa(pid), "root", l.path)
			if err := p.attachLocked(host); err != nil {
				errs = append(errs, err)
				continue
			}
			p.libs[l.key] = host
		}
	}
	errs = append(errs, bpf.Watch("cuda: ", p.objs.Watch, p.watched, want, func(pid int) { delete(p.cuda, pid) }, nil))
	return errors.Join(errs...)
}

// attachLocked attaches the counting program to every configured symbol
// of the library at path and the timing pair to every sync symbol,
// skipping symbols it lacks.
func (p *Probe) attachLocked(path string) error {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return fmt.Errorf("cuda: opening %s: %w", path, err)
	}
	before := p.nlaunch + p.nsync
	for _, sym := range DefaultSyncSymbols {
		// The return probe first: a call that enters between the two
		// attachments then returns to no open entry and is skipped,
		// instead of leaving an entry that never returns. (At Start the
		// watch map is still empty while the probes attach.)
		r, err := ex.Uretprobe(sym, p.objs.SyncExit, nil)
		if errors.Is(err, link.ErrNoSymbol) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cuda: uretprobe on %s in %s: %w", sym, path, bpf.NotSupported(err))
		}
		p.links = append(p.links, r)
		l, err := ex.Uprobe(sym, p.objs.SyncEnter, nil)
		if err != nil {
			return fmt.Errorf("cuda: uprobe on %s in %s: %w", sym, path, bpf.NotSupported(err))
		}
		p.links = append(p.links, l)
		p.nsync++
	}
	for i, sym := range DefaultSymbols {
		l, err := ex.Uprobe(sym, p.objs.OnCall, &link.UprobeOptions{Cookie: uint64(i)})
		if errors.Is(err, link.ErrNoSymbol) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cuda: uprobe on %s in %s: %w", sym, path, bpf.NotSupported(err))
		}
		p.links = append(p.links, l)
		p.nlaunch++
	}
	if p.nlaunch+p.nsync == before {
		return fmt.Errorf("cuda: none of %v in %s", slices.Concat(DefaultSymbols, DefaultSyncSymbols), path)
	}
	return nil
}

type callKey struct {
	tgid, tid, sym uint32
}

type snapshot struct {
	at    time.Time
	calls map[callKey]uint64
	comm  map[callKey]string
}

func (p *Probe) snapshotLocked() (snapshot, error) {
	s := snapshot{at: time.Now(), calls: make(map[callKey]uint64), comm: make(map[callKey]string)}
	err := bpf.Each(p.objs.Calls, func(k cudaCkey, v cudaCval) {
		ck := callKey{k.Tgid, k.Tid, k.Sym}
		s.calls[ck] = v.Calls
		s.comm[ck] = bpf.Comm(v.Comm[:])
	})
	if err != nil {
		return s, fmt.Errorf("cuda: reading calls map: %w", err)
	}
	return s, nil
}

// records returns the records of the calls made between snapshots b and
// a, in pid, tid, symbol order; counters that did not move are left out.
func records(a, b snapshot, symbols []string, per probe.Period) []bundle.CUDARecord {
	wall := a.at.Sub(b.at).Seconds()
	keys := make([]callKey, 0, len(a.calls))
	for k, n := range a.calls {
		if n > b.calls[k] {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y callKey) int {
		return cmp.Or(cmp.Compare(x.tgid, y.tgid), cmp.Compare(x.tid, y.tid), cmp.Compare(x.sym, y.sym))
	})
	out := make([]bundle.CUDARecord, 0, len(keys))
	for _, k := range keys {
		r := bundle.CUDARecord{
			Level: per.Level, Repeat: per.Repeat, Warmup: per.Warmup,
			PID: int(k.tgid), TID: int(k.tid), Name: a.comm[k],
			Calls: a.calls[k] - b.calls[k], WallSec: wall,
		}
		if int(k.sym) < len(symbols) {
			r.Symbol = symbols[k.sym]
		}
		if wall > 0 {
			r.PerSec = float64(r.Calls) / wall
		}
		out = append(out, r)
	}
	return out
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
	if st, err := p.syncStatsLocked(); err == nil { // an error is reported by End
		p.syncBase = st
	}
}

// End appends one bundle.CUDARecord per thread and function called since Begin (or
// the previous End) to cuda.jsonl and one bundle.ThreadBins per thread that was
// inside a blocking call in the pass to cuda_bins.jsonl, then forgets
// threads that have exited. The bins end at per.EndUnixNs (now when
// zero); End waits until their last one is over (up to 10 ms). The
// thread's name is its current one, or the one it had at its first
// counted call (its last blocking call) if it exited. It returns the first
// error the background refresh met since the last End, joined with its
// own; threads that entered blocking calls in the pass of which none came
// through the ring buffer are an error.
func (p *Probe) End(ctx context.Context, per probe.Period) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return errors.New("cuda: End before Start")
	}
	err := p.loop.TakeErr()
	cur, serr := p.snapshotLocked()
	if serr != nil {
		return errors.Join(err, serr)
	}
	for _, r := range records(cur, p.base, DefaultSymbols, per) {
		r.Name = cmp.Or(proctree.Comm(r.PID, r.TID), r.Name)
		if werr := watch.Append(ctx, p.out, "cuda", File, r); werr != nil {
			return errors.Join(err, werr)
		}
	}
	err = errors.Join(err, bpf.ForgetThreads("cuda", p.objs.Calls, cur.calls, func(k callKey, _ uint64) (any, uint32, bool) {
		return cudaCkey{Tgid: k.tgid, Tid: k.tid, Sym: k.sym}, k.tid, proctree.Comm(int(k.tgid), int(k.tid)) == ""
	}))
	p.base = cur
	return errors.Join(err, p.endBinsLocked(ctx, per))
}

// Stop detaches the uprobes and frees the maps. It waits for the refresh
// goroutine until ctx is done.
func (p *Probe) Stop(ctx context.Context) error {
	return p.loop.Close(ctx, "cuda", p.closeLocked)
}

func (p *Probe) closeLocked() error {
	err := bpf.Close(p.links, p.bins, &p.objs)
	p.links, p.objs = nil, cudaObjects{}
	p.nlaunch, p.nsync = 0, 0
	return err
}

// Overhead is the CPU time the probe's BPF programs have used. It does not
// include the uprobes' own cost (a trap into the kernel per call, a few
// microseconds, twice for a timed call), which the calling thread pays.
type Overhead struct {
	// Runtime is the programs' total run time; zero unless BPF statistics
	// are enabled (ebpf.EnableStats or sysctl kernel.bpf_stats_enabled=1).
	Runtime time.Duration
	// Runs is how many calls they saw (all processes mapping the library;
	// a timed call runs two programs).
	Runs uint64
	// Dropped counts launches lost because the map was full.
	Dropped uint64
	// SyncRuntime and SyncRuns are the part of Runtime and Runs of the
	// blocking calls' programs (entry and return).
	SyncRuntime time.Duration
	SyncRuns    uint64
	// SyncDropped counts blocking calls lost because the in-progress map
	// or the ring buffer was full; BinsDropped those left out of a pass's
	// bins because the pass was over bins.MaxBinThreads threads or bins.MaxPassBins
	// bins.
	SyncDropped, BinsDropped uint64
}

// BPFCost returns the BPF program's run time and runs since Start.
func (p *Probe) BPFCost() (time.Duration, uint64, error) {
	o, err := p.Overhead()
	return o.Runtime, o.Runs, err
}

// Overhead returns the cumulative cost since Start.
func (p *Probe) Overhead() (Overhead, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loop.Running() {
		return Overhead{}, errors.New("cuda: not started")
	}
	var o Overhead
	for _, prog := range []*ebpf.Program{p.objs.OnCall, p.objs.SyncEnter, p.objs.SyncExit} {
		st, err := prog.Stats()
		if err != nil {
			return o, fmt.Errorf("cuda: program stats: %w", err)
		}
		o.Runtime += st.Runtime
		o.Runs += st.RunCount
		if prog != p.objs.OnCall {
			o.SyncRuntime += st.Runtime
			o.SyncRuns += st.RunCount
		}
	}
	if err := bpf.Counters(p.objs.Dropped, &o.Dropped); err != nil {
		return o, fmt.Errorf("cuda: reading drop counter: %w", err)
	}
	ss, err := p.syncStatsLocked()
	if err != nil {
		return o, err
	}
	o.SyncDropped = ss.noRoom + ss.ringFull
	o.BinsDropped, _ = p.bins.Totals()
	return o, nil
}

// Losses says how many launches and blocking calls were dropped since
// Start, and what that affects; "" when none were.
func (p *Probe) Losses() string {
	o, err := p.Overhead()
	if err != nil {
		return ""
	}
	var say []string
	if o.Dropped > 0 {
		say = append(say, fmt.Sprintf("%d launches dropped (thread map full): %s undercounts by as much", o.Dropped, File))
	}
	if o.SyncDropped+o.BinsDropped > 0 {
		say = append(say, fmt.Sprintf("%d blocking calls lost to a full in-progress map or ring buffer and %d beyond a pass's %d threads or %d min of bins: "+
			"%s undercounts by as much (dropped_events says which passes)",
			o.SyncDropped, o.BinsDropped, bins.MaxBinThreads, bins.MaxPassBins*bins.BinMs/60000, BinsFile))
	}
	return strings.Join(say, "; ")
}
