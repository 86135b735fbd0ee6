// Package bins holds the time binner that the sched and cuda probes share:
// the intervals a BPF program streams through a ring buffer (a thread on a
// CPU, inside a blocking call...), split into per-thread bins of BinMs of
// the open pass, one array of microseconds per kind of interval. Events
// read between passes are kept and replayed into the next pass; the
// intervals still in progress when a pass ends are added once, even when
// their event is read meanwhile.
package bins

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bpf"
)

// BinMs is the width of one time bin in milliseconds.
const BinMs = 10

// Bounds on what a pass holds in memory. Intervals beyond them are
// dropped and counted.
const (
	// MaxBinThreads is how many threads a pass keeps bins for: the first
	// ones whose intervals reach it.
	MaxBinThreads = 256
	// MaxPassBins is how many bins a pass keeps (30 minutes): the arrays
	// of a longer pass stop there.
	MaxPassBins = 30 * 60 * 1000 / BinMs
)

const (
	BinNs     = BinMs * 1_000_000
	BinUs     = BinMs * 1_000
	chunkBins = 1024 // bins allocated together, for threads that run rarely
	batchSize = 256  // events handed to the binner under one lock
)

// Mark is the Kind of a mark: no interval, but the word that the reader
// has read every event submitted before Start (Binner.WaitMark).
const Mark = math.MaxUint8

// Interval is an event of a BPF program: thread Tid's [Start, End), in
// CLOCK_MONOTONIC ns, of kind Kind (below Config.Kinds, or Mark). Meta is
// what the probe keeps of the thread besides its bins (Config.Merge).
type Interval[M any] struct {
	Meta       M
	Tid        uint32
	Kind       uint8
	Start, End uint64
}

type ikey struct {
	tid   uint32
	kind  uint8
	start uint64
}

// Config is what a probe's binner is made of.
type Config[M any] struct {
	Name   string // the probe's, for errors ("sched: bins: ...")
	Kinds  int    // kinds of interval, each an array of bins (1 or 2)
	Recent int    // events kept for the next pass
	Seen   int    // events remembered while End reads the intervals in progress
	// Size is the size of a ring buffer record, Decode its decoder.
	Size   int
	Decode func(raw []byte) Interval[M]
	// Merge, when set, updates a thread's Meta from each of its intervals
	// that reaches the bins.
	Merge func(t, iv *M)
}

// Thread holds the bins of one thread: Kinds µs counters a bin.
type Thread[M any] struct {
	Meta   M
	kinds  int
	chunks [][]uint16
	any    bool
}

// NewThread returns the empty bins of a thread: kinds arrays, and meta.
func NewThread[M any](kinds int, meta M) *Thread[M] { return &Thread[M]{Meta: meta, kinds: kinds} }

// Add adds us µs to bin of array kind, saturating at 65,535.
func (t *Thread[M]) Add(bin int, kind uint8, us int64) {
	ci := bin / chunkBins
	for len(t.chunks) <= ci {
		t.chunks = append(t.chunks, nil)
	}
	c := t.chunks[ci]
	if c == nil {
		c = make([]uint16, chunkBins*t.kinds)
		t.chunks[ci] = c
	}
	v := &c[bin%chunkBins*t.kinds+int(kind)]
	*v = uint16(min(int64(*v)+us, math.MaxUint16))
	t.any = true
}

// Arrays returns the thread's first n bins, one array per kind.
func (t *Thread[M]) Arrays(n int) [][]int {
	out := make([][]int, t.kinds)
	for k := range out {
		out[k] = make([]int, n)
	}
	for i := range min(n, len(t.chunks)*chunkBins) {
		if c := t.chunks[i/chunkBins]; c != nil {
			for k := range out {
				out[k][i] = int(c[i%chunkBins*t.kinds+k])
			}
		}
	}
	return out
}

// Binner splits the streamed intervals into the bins of the open pass. The
// reader goroutine (Open) feeds it; Begin and Finish open and close
// passes. Times are converted from CLOCK_MONOTONIC to unix ns with one
// offset, taken at Start, so that bins are on the capture's clock.
type Binner[M any] struct {
	cfg Config[M]
	mu  sync.Mutex
	off int64           // unix ns − CLOCK_MONOTONIC ns
	rd  *ringbuf.Reader // set by Open

	open    bool
	start   int64 // unix ns of the open pass's bin 0
	threads map[uint32]*Thread[M]
	lastTid uint32     // the thread of the last interval added,
	lastT   *Thread[M] // and its bins (nil when threads changes)
	capped  uint64     // intervals the open pass lost to the bounds
	added   uint64     // intervals that fell in the open pass (sub-µs ones included)
	prevEnd int64      // unix ns where the last pass ended (at first: Start)

	// recent is a ring of the last events read, replayed into a pass that
	// begins before they ended (events read between passes, or read while
	// End closed the previous pass). Overwritten events that ended after
	// keepFrom (the last pass's end; MaxUint64 while a pass is open) are
	// counted, for the next pass to charge when they fall in it.
	recent     []Interval[M]
	next       int
	filled     bool
	keepFrom   uint64
	lostAfter  uint64
	lostMaxEnd uint64

	mark    uint64        // CLOCK_MONOTONIC ns of the latest mark read
	flushes uint64        // ErrFlushed seen by the reader
	wake    chan struct{} // poked at each mark and flush
	done    chan struct{} // closed when the reader returns

	// While End reads the intervals in progress: the events read that
	// ended at or after captureFrom, to tell an interval in progress from
	// one whose event was read meanwhile.
	capturing   bool
	captureFrom uint64
	seen        map[ikey]struct{}
	seenFull    bool

	cappedTotal uint64 // since Start
	err         error  // the reader's, once it stopped
}

// New returns a binner whose unix ns are CLOCK_MONOTONIC ns + off, started
// at startUnix (where a pass that End closes without Begin starts).
func New[M any](cfg Config[M], off, startUnix int64) *Binner[M] {
	return &Binner[M]{
		cfg:      cfg,
		off:      off,
		prevEnd:  startUnix,
		recent:   make([]Interval[M], cfg.Recent),
		keepFrom: 0, // until the first pass, every event may belong to it
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

func (b *Binner[M]) toMono(unixNs int64) uint64 {
	return uint64(max(unixNs-b.off, 0))
}

// Open starts reading the ring buffer events (the probe's BPF map) on a
// goroutine of its own (read), until Close. The error wraps
// probe.ErrNotSupported when the kernel does not allow the reader
// (bpf.NotSupported).
func (b *Binner[M]) Open(events *ebpf.Map) error {
	rd, err := ringbuf.NewReader(events)
	if err != nil {
		return fmt.Errorf("%s: ring buffer: %w", b.cfg.Name, bpf.NotSupported(err))
	}
	b.rd = rd
	go b.read(rd)
	return nil
}

// Close closes the ring buffer's reader, if Open opened one, and waits for
// its goroutine to return. b may be nil.
func (b *Binner[M]) Close() error {
	if b == nil || b.rd == nil {
		return nil
	}
	err := b.rd.Close()
	<-b.done // the reader returns once the ring buffer is closed
	return err
}

// read feeds b from rd until rd is closed, then closes done. Events are
// handed over in batches, each under one lock: at most batchSize, and
// whatever was read when the ring buffer has nothing more for now. A flush
// (rd.Flush) is counted once every event committed before it has been
// handed over.
func (b *Binner[M]) read(rd *ringbuf.Reader) {
	defer close(b.done)
	var rec ringbuf.Record
	batch := make([]Interval[M], 0, batchSize)
	for {
		err := rd.ReadInto(&rec)
		if err == nil && len(rec.RawSample) >= b.cfg.Size {
			batch = append(batch, b.cfg.Decode(rec.RawSample))
		}
		if len(batch) > 0 && (err != nil || rec.Remaining == 0 || len(batch) == cap(batch)) {
			b.Events(batch...)
			batch = batch[:0]
		}
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrFlushed):
			b.mu.Lock()
			b.flushes++
			b.mu.Unlock()
			b.poke()
		case errors.Is(err, ringbuf.ErrClosed):
			return
		default:
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			return
		}
	}
}

func (b *Binner[M]) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Events takes events read from the ring buffer, in order.
func (b *Binner[M]) Events(ivs ...Interval[M]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range ivs {
		iv := &ivs[i]
		if iv.Kind == Mark {
			b.mark = max(b.mark, iv.Start)
			b.poke()
			continue
		}
		if int(iv.Kind) >= b.cfg.Kinds || iv.End <= iv.Start {
			continue
		}
		if b.filled {
			if old := b.recent[b.next]; old.End > b.keepFrom {
				b.lostAfter++
				b.lostMaxEnd = max(b.lostMaxEnd, old.End)
			}
		}
		b.recent[b.next] = *iv
		if b.next++; b.next == len(b.recent) {
			b.next, b.filled = 0, true
		}
		if b.capturing && iv.End >= b.captureFrom {
			if len(b.seen) < b.cfg.Seen {
				b.seen[ikey{iv.Tid, iv.Kind, iv.Start}] = struct{}{}
			} else {
				b.seenFull = true
			}
		}
		if b.open {
			b.addLocked(iv)
		}
	}
}

// addLocked adds the interval to the open pass, clipped to it. Whole
// microseconds are counted from the pass start, floored at both ends, so
// that adjacent intervals add up without rounding drift.
func (b *Binner[M]) addLocked(iv *Interval[M]) {
	s := int64(iv.Start) + b.off - b.start
	e := int64(iv.End) + b.off - b.start
	if e <= 0 || e <= s {
		return
	}
	s = max(s, 0)
	b.added++
	const limit = int64(MaxPassBins) * BinNs
	if e > limit {
		b.dropLocked()
		if s >= limit {
			return
		}
		e = limit
	}
	su, eu := s/1000, e/1000
	if eu <= su {
		return
	}
	t := b.lastT
	if t == nil || b.lastTid != iv.Tid {
		if t = b.threads[iv.Tid]; t == nil {
			if len(b.threads) >= MaxBinThreads {
				b.dropLocked()
				return
			}
			t = &Thread[M]{kinds: b.cfg.Kinds}
			b.threads[iv.Tid] = t
		}
		b.lastTid, b.lastT = iv.Tid, t
	}
	if b.cfg.Merge != nil {
		b.cfg.Merge(&t.Meta, &iv.Meta)
	}
	for su < eu {
		bin := su / BinUs
		hi := min(eu, (bin+1)*BinUs)
		t.Add(int(bin), iv.Kind, hi-su)
		su = hi
	}
}

func (b *Binner[M]) dropLocked() {
	b.capped++
	b.cappedTotal++
}

// Begin opens the pass of per, whose bin 0 starts at per.StartUnixNs (now
// when zero), replaying the events already read that end after it.
func (b *Binner[M]) Begin(per probe.Period) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.beginLocked(cmp.Or(per.StartUnixNs, time.Now().UnixNano()))
}

func (b *Binner[M]) beginLocked(startUnix int64) {
	b.open, b.start, b.capped, b.added = true, startUnix, 0, 0
	b.threads, b.lastT = make(map[uint32]*Thread[M]), nil
	from := b.toMono(startUnix)
	if b.lostAfter > 0 && b.lostMaxEnd > from {
		b.capped += b.lostAfter
		b.cappedTotal += b.lostAfter
	}
	b.lostAfter, b.lostMaxEnd, b.keepFrom = 0, 0, math.MaxUint64
	n := b.next
	if b.filled {
		n = len(b.recent)
	}
	for i := range b.recent[:n] {
		if iv := &b.recent[i]; iv.End > from {
			b.addLocked(iv)
		}
	}
}

// EnsureOpen opens a pass where the last one ended, for End without Begin,
// and returns the open pass's start.
func (b *Binner[M]) EnsureOpen() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		b.beginLocked(b.prevEnd)
	}
	return b.start
}

// Pass is the open pass as End is about to close it: N whole bins from
// Start (unix ns) to BinsEnd (BinsEndMono on CLOCK_MONOTONIC), for a pass
// that ended at End.
type Pass struct {
	Start, End, BinsEnd int64
	BinsEndMono         uint64
	N                   int
}

// Head returns the line of thread tid of process pid in the pass, of per,
// named as the thread is now, else (it exited) comm, without its arrays:
// StartUnixNs is the pass's start (probe.Period.StartUnixNs, else the time
// of Begin, or where the previous pass ended when End came without
// Begin), the start of bin 0.
func (ps Pass) Head(per probe.Period, pid int, tid uint32, comm string) bundle.ThreadBins {
	return bundle.ThreadBins{Level: per.Level, Repeat: per.Repeat, Warmup: per.Warmup, PID: pid, TID: int(tid),
		Name: cmp.Or(proctree.Comm(pid, int(tid)), comm), StartUnixNs: ps.Start, BinMs: BinMs}
}

// Ending opens a pass if none is open (EnsureOpen), ends it at endUnix (at
// now when that is not after its start or still to come), and waits until
// its last bin, which is whole, is over. The error is ctx's, which cuts
// the wait short.
func (b *Binner[M]) Ending(ctx context.Context, endUnix int64) (Pass, error) {
	p := Pass{Start: b.EnsureOpen(), End: endUnix}
	if now := time.Now().UnixNano(); p.End <= p.Start || p.End > now {
		p.End = now
	}
	p.N = min(int((p.End-p.Start+BinNs-1)/BinNs), MaxPassBins)
	p.BinsEnd = p.Start + int64(p.N)*BinNs
	p.BinsEndMono = b.toMono(p.BinsEnd)
	return p, p.WaitEnd(ctx, b.cfg.Name, time.Now().UnixNano())
}

// WaitEnd waits until the pass's last bin, which is whole, is over: until
// BinsEnd, now being now (unix ns). The error, when ctx is done first, is
// "<name>: bins: <ctx's error>".
func (ps Pass) WaitEnd(ctx context.Context, name string, now int64) error {
	d := time.Duration(ps.BinsEnd - now)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: bins: %w", name, ctx.Err())
	}
}

// Capture starts remembering the events read from now on that end at or
// after from.
func (b *Binner[M]) Capture(from uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.capturing, b.captureFrom = true, from
	b.seen, b.seenFull = make(map[ikey]struct{}), false
}

// wait waits up to d for ready, checked at each mark and flush read. It
// fails when the reader has stopped or ctx is done.
func (b *Binner[M]) wait(ctx context.Context, d time.Duration, ready func() bool) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		b.mu.Lock()
		ok := ready()
		b.mu.Unlock()
		if ok {
			return true, nil
		}
		select {
		case <-b.wake:
		case <-t.C:
			return false, nil
		case <-b.done:
			_, err := b.Totals()
			return false, fmt.Errorf("%s: bins: the ring buffer's reader stopped: %w", b.cfg.Name, err)
		case <-ctx.Done():
			return false, fmt.Errorf("%s: bins: %w", b.cfg.Name, ctx.Err())
		}
	}
}

// WaitMark waits up to d until the reader has read a mark written at or
// after at (CLOCK_MONOTONIC ns), that is every event submitted before that
// mark, and says whether it has.
func (b *Binner[M]) WaitMark(ctx context.Context, at uint64, d time.Duration) (bool, error) {
	return b.wait(ctx, d, func() bool { return b.mark >= at })
}

// Drain waits until the reader has read every event committed to the ring
// buffer before it was called, flushing it.
func (b *Binner[M]) Drain(ctx context.Context) error {
	b.mu.Lock()
	f0 := b.flushes
	b.mu.Unlock()
	if err := b.rd.Flush(); err != nil {
		return fmt.Errorf("%s: bins: flushing the ring buffer: %w", b.cfg.Name, err)
	}
	ok, err := b.wait(ctx, time.Second, func() bool { return b.flushes != f0 })
	if err == nil && !ok {
		err = fmt.Errorf("%s: bins: the ring buffer's reader did not catch up within 1 s", b.cfg.Name)
	}
	return err
}

// Finish closes the open pass at endUnix. inProgress holds the intervals
// that had not ended when End read them (from a BPF map); one whose event
// the reader has meanwhile read (since Capture) is not added twice. It
// returns the bins of each thread with time in the pass, the number of
// intervals the pass lost, and how many fell in it.
func (b *Binner[M]) Finish(endUnix int64, inProgress []Interval[M]) (out map[uint32]*Thread[M], capped, added uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range inProgress {
		iv := &inProgress[i]
		if _, ok := b.seen[ikey{iv.Tid, iv.Kind, iv.Start}]; ok {
			continue
		}
		if b.seenFull {
			b.dropLocked() // cannot tell: leave it out
			continue
		}
		b.addLocked(iv)
	}
	b.capturing, b.seen, b.seenFull = false, nil, false
	out = b.threads
	maps.DeleteFunc(out, func(_ uint32, t *Thread[M]) bool { return !t.any })
	capped, added = b.capped, b.added
	b.open, b.threads, b.lastT, b.capped = false, nil, nil, 0
	b.prevEnd = endUnix
	// Events that ended after this pass may belong to the next one.
	b.keepFrom, b.lostAfter, b.lostMaxEnd = b.toMono(endUnix), 0, 0
	if b.filled {
		if oldest := b.recent[b.next]; oldest.End > b.keepFrom {
			// Some of the overwritten events may have ended after it.
			b.lostAfter, b.lostMaxEnd = 1, oldest.End
		}
	}
	return out, capped, added
}

// Totals returns the intervals lost to the bounds since Start and the
// reader's error, if it stopped.
func (b *Binner[M]) Totals() (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cappedTotal, b.err
}
