package proc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// BinsFile is the bundle file of the per-thread time bins: one bundle.ThreadBins
// per thread and pass, in the format of sched_bins.jsonl.
const BinsFile = bundle.ProcBinsFile

// DefaultBinMs is the width of a time bin: every
// thread's schedstat is read every 20 ms (50 Hz). Narrower bins cost more
// reads, and the kernel moves a running thread's on-CPU counter only at its
// scheduler tick (4 ms at HZ=250), so much narrower ones would be noise.
const DefaultBinMs = 20

// Bounds on what the bins hold. What goes beyond them is counted in
// dropped_events.
const (
	// MaxBinThreads is how many threads a pass keeps bins for: the first
	// ones with time in it.
	MaxBinThreads = 256
	// MaxPassDuration is how much of a pass has bins; the arrays of a
	// longer pass stop there.
	MaxPassDuration = 30 * time.Minute
	// MaxSampledThreads is how many threads' schedstat files are kept open
	// and read every bin; the target's further threads are not sampled.
	MaxSampledThreads = 1024
)

// newThreadHorizon says which threads that a refresh finds are new: those
// started at most this long before the previous refresh listed the
// threads. Their counters so far are spread back to their start; an older
// thread seen for the first time (a process the shared tree walk found
// late, a slot freed under MaxSampledThreads) is only a baseline, since
// when its time was spent is unknown. One second covers a process forked
// just after a tree walk (watch.TreeMaxAge plus the refresh interval).
const newThreadHorizon = time.Second

// share is one bin's part of an amount that spread divides.
type share struct {
	bin int64 // may be negative: before the pass start
	us  int64
}

// spread appends to dst the shares of amount µs spread evenly over [s, e)
// (ns from the pass start) that fall in each bin of width binNs, and
// returns dst. The shares are whole µs and add up to amount exactly: bin i
// gets A(hi) − A(lo), where [lo, hi) is its part of [s, e) and A(x) is
// floor(amount·(x−s)/(e−s)). Bins with a zero share are left out. When e ≤
// s the whole amount goes to the bin of e−1 ns.
func spread(dst []share, s, e, binNs, amount int64) []share {
	if amount <= 0 {
		return dst
	}
	if e <= s {
		return append(dst, share{floorDiv(e-1, binNs), amount})
	}
	span := uint64(e - s)
	var prev int64
	for lo := s; lo < e; {
		bin := floorDiv(lo, binNs)
		hi := min(e, (bin+1)*binNs)
		cum := int64(mulDiv(uint64(amount), uint64(hi-s), span))
		if us := cum - prev; us > 0 {
			dst = append(dst, share{bin, us})
		}
		prev, lo = cum, hi
	}
	return dst
}

// creditSpan returns the interval [s, e) that a thread's counter growth of
// on and rq µs, read at t0 and t1 (ns), is spread over: [t0, t1), or when
// the growth is longer than that, the on+rq µs before t1. The kernel adds
// a run-queue wait to its counter when the wait ends, and a running
// thread's on-CPU time at its ticks, so a read may bring time spent before
// the previous read.
func creditSpan(t0, t1, on, rq int64) (s, e int64) {
	return min(t0, t1-(on+rq)*1000), t1
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// mulDiv returns a·b/c without overflow; a·b/c must fit in 64 bits.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// parseRunWait returns the first two numbers of the text of a schedstat
// file ("run wait slices\n": ns on a CPU, ns waiting on a run queue)
// without allocating, for the fast loop.
func parseRunWait(b []byte) (run, wait uint64, ok bool) {
	var v [2]uint64
	i := 0
	for k := range v {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v[k] = v[k]*10 + uint64(b[i]-'0')
			i++
		}
		if i == start || i == len(b) || b[i] != ' ' && b[i] != '\n' {
			return 0, 0, false
		}
		i++
	}
	return v[0], v[1], true
}

// threadKey names a thread in a pass (a tid may be reused by another
// process).
type threadKey struct{ pid, tid int }

// passThread is one thread's bins in a pass: µs on a CPU and on a run
// queue, two arrays; its Meta is the thread's name. A bin of DefaultBinMs
// holds at most 20,000 µs of each, within the 16-bit counters.
type passThread = bins.Thread[string]

// binPass is the pass whose bins the sampler fills.
type binPass struct {
	start   int64 // unix ns of bin 0
	threads map[threadKey]*passThread
	dropped uint64 // samples lost to the bounds
}

// binThread is a sampled thread: its schedstat file, open, and its last
// read.
type binThread struct {
	pid, tid int
	name     string
	fd       int
	on, rq   int64 // µs on a CPU and on a run queue at the last read (cumulative, floored)
	at       int64 // unix ns of the last read
	pass     *binPass
	acc      *passThread // its bins in pass, once it has time there
}

// binner samples the target's threads' schedstat every bin on an OS thread
// of its own (start) and spreads what each read adds into the bins of the open
// pass. The probe tells it the threads (sync, at each tree refresh) and
// opens and closes passes.
//
// Its lock is apart from the probe's, so that the fast loop goes on while
// the probe walks /proc; the probe takes it (holding its own first) only
// to hand over threads and passes. Methods whose names end in Locked need
// b.mu held.
type binner struct {
	binNs   int64
	maxBins int
	epoch   time.Time // times are unix ns: epochNs + monotonic time since epoch
	epochNs int64
	bootNs  int64 // unix ns of boot (CLOCK_BOOTTIME's zero)

	mu         sync.Mutex
	buf        []byte
	scratch    []share
	threads    map[int]*binThread // by tid
	untracked  int                // threads the last sync found but could not sample
	lastListed int64              // unix ns when the last sync's threads were listed; 0 before the first
	pass       *binPass           // nil when none is open
	prevEnd    int64              // unix ns where the last pass ended
	dropped    uint64             // samples the passes closed since Start lost
	cancel     context.CancelFunc // stops the fast loop
	loopTID    atomic.Int64       // the fast loop's OS thread, once it runs (for measuring its cost)
	done       chan struct{}      // closed when the fast loop returns; nil when not running
}

func newBinner(binMs int) *binner {
	b := &binner{
		binNs:   int64(binMs) * int64(time.Millisecond),
		maxBins: max(1, int(MaxPassDuration/(time.Duration(binMs)*time.Millisecond))),
		epoch:   time.Now(),
		buf:     make([]byte, 128),
		threads: make(map[int]*binThread),
	}
	b.epochNs = b.epoch.UnixNano()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err == nil {
		b.bootNs = b.epochNs - ts.Nano()
	}
	b.prevEnd = b.epochNs
	return b
}

// now returns the unix ns of now, on the monotonic clock since epoch.
func (b *binner) now() int64 { return b.epochNs + int64(time.Since(b.epoch)) }

// start starts the fast loop: a sweep every bin, on a goroutine locked to
// an OS thread of its own, so that its cost can be read apart from the
// rest of the process (loopTID's schedstat; BenchmarkProbe50Threads). A Go
// ticker cost the same here as clock_nanosleep to absolute times.
func (b *binner) start() {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		b.loopTID.Store(int64(unix.Gettid()))
		watch.Every(ctx, time.Duration(b.binNs), &b.mu, b.sweepLocked)
	}()
}

// close stops the fast loop, waiting for it (it may be in a sweep) until ctx is
// done, and closes the threads' files. The probe calls start and close
// holding its lock.
func (b *binner) close(ctx context.Context) error {
	if b.done != nil {
		b.cancel()
		select {
		case <-b.done:
		case <-ctx.Done():
			return fmt.Errorf("proc: stopping the bins' sampler: %w", ctx.Err())
		}
		b.done = nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for tid, t := range b.threads {
		_ = unix.Close(t.fd)
		delete(b.threads, tid)
	}
	return nil
}

// sweepLocked reads every sampled thread once. A thread whose file no
// longer reads has exited: its file is closed.
func (b *binner) sweepLocked() {
	if b.pass != nil {
		b.pass.dropped += uint64(b.untracked)
	}
	for tid, t := range b.threads {
		if !b.readLocked(t) {
			_ = unix.Close(t.fd)
			delete(b.threads, tid)
		}
	}
}

// readLocked reads t's schedstat and bins what it grew by since the last
// read. It reports whether the file could be read.
func (b *binner) readLocked(t *binThread) bool {
	on, rq, at, ok := b.pread(t.fd)
	if !ok {
		return false
	}
	dOn, dRq := max(on-t.on, 0), max(rq-t.rq, 0)
	s, e := creditSpan(t.at, at, dOn, dRq)
	t.on, t.rq, t.at = on, rq, at
	if b.pass != nil && dOn+dRq > 0 {
		b.creditLocked(t, s, e, dOn, dRq)
	}
	return true
}

// pread reads a schedstat file from offset 0 (a /proc file regenerates
// its text on a read from there) and returns its µs on a CPU and on a run
// queue, and when it read them.
func (b *binner) pread(fd int) (on, rq, at int64, ok bool) {
	for {
		n, err := unix.Pread(fd, b.buf, 0)
		if err == unix.EINTR {
			continue
		}
		at = b.now()
		if err != nil {
			return 0, 0, at, false
		}
		run, wait, ok := parseRunWait(b.buf[:n])
		return int64(run / 1000), int64(wait / 1000), at, ok
	}
}

// creditLocked spreads on and rq µs of thread t over [s, e) (unix ns) into
// the open pass. Time before the pass start belongs to no pass.
func (b *binner) creditLocked(t *binThread, s, e, on, rq int64) {
	p := b.pass
	if e <= p.start {
		return
	}
	if t.pass != p {
		t.pass, t.acc = p, p.threads[threadKey{t.pid, t.tid}]
	}
	if t.acc == nil {
		if len(p.threads) >= MaxBinThreads {
			p.dropped++
			return
		}
		t.acc = bins.NewThread(2, t.name)
		p.threads[threadKey{t.pid, t.tid}] = t.acc
	}
	capped := false
	for kind, us := range [2]int64{on, rq} {
		b.scratch = spread(b.scratch[:0], s-p.start, e-p.start, b.binNs, us)
		for _, sh := range b.scratch {
			switch {
			case sh.bin < 0:
			case sh.bin >= int64(b.maxBins):
				capped = true
			default:
				t.acc.Add(int(sh.bin), uint8(kind), sh.us)
			}
		}
	}
	if capped {
		p.dropped++
	}
}

// sync makes the sampled threads those of threads (by tid, from a tree
// refresh that listed them at listed): it opens the schedstat of threads
// new to it and closes those of threads gone, and keeps names current. A
// new thread's first read is its baseline, unless it started since about
// the previous refresh: then its counters so far are binned from its
// start.
func (b *binner) sync(threads map[int]sample, listed time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for tid, t := range b.threads {
		if s, ok := threads[tid]; !ok || s.pid != t.pid {
			_ = unix.Close(t.fd)
			delete(b.threads, tid)
		}
	}
	horizon := b.lastListed - int64(newThreadHorizon)
	b.untracked = 0
	for tid, s := range threads {
		if t, ok := b.threads[tid]; ok {
			t.name = s.name
			if t.acc != nil && t.pass == b.pass {
				t.acc.Meta = s.name
			}
			continue
		}
		if len(b.threads) >= MaxSampledThreads {
			b.untracked++
			continue
		}
		fd, err := unix.Open("/proc/"+strconv.Itoa(s.pid)+"/task/"+strconv.Itoa(tid)+"/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
				b.untracked++ // not gone, yet not sampled
			}
			continue
		}
		t := &binThread{pid: s.pid, tid: tid, name: s.name, fd: fd}
		born := b.bootNs + int64(s.startTicks)*(1e9/proctree.UserHZ)
		var ok bool
		if b.lastListed != 0 && b.bootNs != 0 && born >= horizon {
			// New: what its counters hold was spent since it started.
			t.at = born
			ok = b.readLocked(t)
		} else {
			t.on, t.rq, t.at, ok = b.pread(t.fd)
		}
		if !ok {
			_ = unix.Close(t.fd)
			continue
		}
		b.threads[tid] = t
	}
	b.lastListed = b.epochNs + int64(listed.Sub(b.epoch)) // on the monotonic clock since epoch
}

// begin opens a pass whose bin 0 starts at start (unix ns), dropping the
// one open.
func (b *binner) begin(start int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pass = &binPass{start: start, threads: make(map[threadKey]*passThread)}
}

// ending opens a pass where the last one ended if none is open (End
// without Begin) and returns its bounds for a pass ending at endUnix (at
// now when that is not after its start or still to come): N whole bins
// from Start to BinsEnd.
func (b *binner) ending(endUnix int64) bins.Pass {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pass == nil {
		b.pass = &binPass{start: b.prevEnd, threads: make(map[threadKey]*passThread)}
	}
	ps := bins.Pass{Start: b.pass.start, End: endUnix}
	if now := b.now(); ps.End <= ps.Start || ps.End > now {
		ps.End = now
	}
	ps.N = max(1, min(int((ps.End-ps.Start+b.binNs-1)/b.binNs), b.maxBins))
	ps.BinsEnd = ps.Start + int64(ps.N)*b.binNs
	return ps
}

// finish reads every thread once more (the last bin is over), closes the
// open pass and opens the next one where it ended, for an End without
// Begin. It returns the closed pass.
func (b *binner) finish(ps bins.Pass) *binPass {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweepLocked()
	p := b.pass
	b.dropped += p.dropped
	b.prevEnd = ps.End
	b.pass = &binPass{start: ps.End, threads: make(map[threadKey]*passThread)}
	return p
}

// losses returns the samples that the passes closed since Start lost.
func (b *binner) losses() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// endBinsLocked closes the pass's bins and writes them to BinsFile, one
// line per thread with time in the pass. It waits until the pass's last
// bin, which is whole, is over (at most one bin).
func (p *Probe) endBinsLocked(ctx context.Context, per probe.Period) error {
	b := p.bins
	ps := b.ending(per.EndUnixNs)
	if err := ps.WaitEnd(ctx, "proc", b.now()); err != nil {
		return err
	}
	pass := b.finish(ps)
	keys := slices.SortedFunc(maps.Keys(pass.threads), func(x, y threadKey) int { return cmp.Or(cmp.Compare(x.pid, y.pid), cmp.Compare(x.tid, y.tid)) })
	for _, k := range keys {
		r := bundle.ThreadBins{Level: per.Level, Repeat: per.Repeat, Warmup: per.Warmup,
			PID: k.pid, TID: k.tid, Name: pass.threads[k].Meta, StartUnixNs: ps.Start, BinMs: DefaultBinMs,
			DroppedEvents: pass.dropped, Source: "proc"}
		a := pass.threads[k].Arrays(ps.N)
		r.OnCPUUs, r.RunqUs = a[0], a[1]
		if sum(r.OnCPUUs)+sum(r.RunqUs) == 0 {
			continue // all its time fell past the last bin
		}
		if err := watch.Append(ctx, p.out, "proc", BinsFile, r); err != nil {
			return err
		}
	}
	return nil
}

func sum(xs []int) int {
	var s int
	for _, x := range xs {
		s += x
	}
	return s
}
