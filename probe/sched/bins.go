package sched

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/probe/internal/watch"
	"github.com/asrprof/asrprof/trace/bundle"
)

// BinsFile is the bundle file of the per-thread time bins: one BinsRecord
// per thread and pass.
const BinsFile = bundle.SchedBinsFile

// BinMs is the width of one time bin in milliseconds.
const BinMs = 10

// Bounds on what a pass holds in memory. Events beyond them are dropped
// and counted (BinsRecord.DroppedEvents, Losses).
const (
	// MaxBinThreads is how many threads a pass keeps bins for: the first
	// ones to run in the pass.
	MaxBinThreads = 256
	// MaxPassBins is how many bins a pass keeps (30 minutes): the arrays
	// of a longer pass stop there.
	MaxPassBins = 30 * 60 * 1000 / BinMs
)

// BinsRecord is one line of sched_bins.jsonl: one thread over one pass, in
// bins of BinMs. Bin i covers [StartUnixNs + i·BinMs, StartUnixNs +
// (i+1)·BinMs), all bins whole: the last one ends up to BinMs after the
// pass. OnCPUUs[i] and RunqUs[i] are the microseconds of bin i that the
// thread spent on a CPU and runnable waiting for one; the rest of the bin
// (BinMs·1000 − OnCPUUs[i] − RunqUs[i]) it was off-CPU (blocked, sleeping,
// or not yet or no longer alive).
type BinsRecord struct {
	Level  string `json:"level"`
	Repeat int    `json:"repeat"`
	Warmup bool   `json:"warmup"`
	PID    int    `json:"pid"`
	TID    int    `json:"tid"`
	Name   string `json:"name"`
	// StartUnixNs is the pass's start (probe.Period.StartUnixNs, else the
	// time of Begin, or where the previous pass ended when End came
	// without Begin): the start of bin 0.
	StartUnixNs int64 `json:"start_unix_ns"`
	BinMs       int   `json:"bin_ms"`
	// The arrays have ceil(pass wall / BinMs) bins (at most MaxPassBins).
	OnCPUUs []int `json:"oncpu_us"`
	RunqUs  []int `json:"runq_us"`
	// DroppedEvents is how many intervals the pass lost (ring buffer full,
	// over MaxBinThreads or MaxPassBins), over all threads; 0 normally.
	DroppedEvents uint64 `json:"dropped_events"`
}

// Kinds of event (EV_* in bpf/sched.bpf.c).
const (
	evOnCPU = 0
	evRunq  = 1
	evMark  = 2
)

const (
	binNs     = BinMs * 1_000_000
	binUs     = BinMs * 1_000
	chunkBins = 1024    // bins allocated together, for threads that run rarely
	maxRecent = 1 << 16 // events kept for the next pass (recent)
	maxSeen   = 1 << 16 // events remembered while End reads the map (seen)
	eventSize = 24      // sizeof(struct event)
	batchSize = 256     // events handed to the binner under one lock
)

// interval is an event of the BPF program: CLOCK_MONOTONIC ns.
type interval struct {
	tid        uint32
	kind       uint8
	start, end uint64
}

type ikey struct {
	tid   uint32
	kind  uint8
	start uint64
}

// chunk holds chunkBins bins of one thread: µs on-CPU, µs on the run queue.
type chunk [chunkBins][2]uint16

type threadBins struct {
	chunks []*chunk
	any    bool
}

func (t *threadBins) add(bin int, kind uint8, us int64) {
	ci := bin / chunkBins
	for len(t.chunks) <= ci {
		t.chunks = append(t.chunks, nil)
	}
	c := t.chunks[ci]
	if c == nil {
		c = new(chunk)
		t.chunks[ci] = c
	}
	v := &c[bin%chunkBins][kind]
	*v = uint16(min(int64(*v)+us, math.MaxUint16))
	t.any = true
}

func (t *threadBins) arrays(n int) (on, rq []int) {
	on, rq = make([]int, n), make([]int, n)
	for ci, c := range t.chunks {
		if c == nil {
			continue
		}
		for j := range c {
			i := ci*chunkBins + j
			if i >= n {
				break
			}
			on[i], rq[i] = int(c[j][evOnCPU]), int(c[j][evRunq])
		}
	}
	return on, rq
}

// binner splits the streamed intervals into the bins of the open pass. The
// reader goroutine feeds it; Begin and End open and close passes. Times
// are converted from CLOCK_MONOTONIC to unix ns with one offset, taken at
// Start, so that bins are on the capture's clock.
type binner struct {
	mu  sync.Mutex
	off int64 // unix ns − CLOCK_MONOTONIC ns

	open    bool
	start   int64 // unix ns of the open pass's bin 0
	threads map[uint32]*threadBins
	lastTid uint32      // the thread of the last interval added,
	lastT   *threadBins // and its bins (nil when threads changes)
	capped  uint64      // intervals the open pass lost to the bounds
	prevEnd int64       // unix ns where the last pass ended (at first: Start)

	// recent is a ring of the last events read, replayed into a pass that
	// begins before they ended (events read between passes, or read while
	// End closed the previous pass). Overwritten events that ended after
	// keepFrom (the last pass's end; MaxUint64 while a pass is open) are
	// counted, for the next pass to charge when they fall in it.
	recent     []interval
	next       int
	filled     bool
	keepFrom   uint64
	lostAfter  uint64
	lostMaxEnd uint64

	mark   uint64        // CLOCK_MONOTONIC ns of the latest iterator mark read
	marked chan struct{} // poked at each mark

	// While End reads the stats map: the events read that ended at or
	// after captureFrom, to tell an interval in progress from one whose
	// event was read meanwhile.
	capturing   bool
	captureFrom uint64
	seen        map[ikey]struct{}
	seenFull    bool

	cappedTotal uint64 // since Start
	err         error  // the reader's, once it stopped
}

func newBinner(off, startUnix int64) *binner {
	return &binner{
		off:      off,
		prevEnd:  startUnix,
		recent:   make([]interval, maxRecent),
		keepFrom: 0, // until the first pass, every event may belong to it
		marked:   make(chan struct{}, 1),
	}
}

func (b *binner) toMono(unixNs int64) uint64 {
	if m := unixNs - b.off; m > 0 {
		return uint64(m)
	}
	return 0
}

// readEvents feeds b from rd until rd is closed. Events are handed over
// in batches, each under one lock: at most batchSize, and whatever was
// read when the ring buffer has nothing more for now.
func readEvents(rd *ringbuf.Reader, b *binner, done chan<- struct{}) {
	defer close(done)
	var rec ringbuf.Record
	batch := make([]interval, 0, batchSize)
	for {
		err := rd.ReadInto(&rec)
		if err == nil && len(rec.RawSample) >= eventSize {
			raw := rec.RawSample
			batch = append(batch, interval{
				tid:   binary.LittleEndian.Uint32(raw[0:4]),
				kind:  raw[4],
				start: binary.LittleEndian.Uint64(raw[8:16]),
				end:   binary.LittleEndian.Uint64(raw[16:24]),
			})
		}
		if len(batch) > 0 && (err != nil || rec.Remaining == 0 || len(batch) == cap(batch)) {
			b.events(batch)
			batch = batch[:0]
		}
		switch {
		case err == nil, errors.Is(err, ringbuf.ErrFlushed), errors.Is(err, os.ErrDeadlineExceeded):
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

// events takes events read from the ring buffer, in order.
func (b *binner) events(ivs []interval) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, iv := range ivs {
		b.eventLocked(iv)
	}
}

// event takes one event read from the ring buffer.
func (b *binner) event(iv interval) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eventLocked(iv)
}

func (b *binner) eventLocked(iv interval) {
	if iv.kind == evMark {
		b.mark = max(b.mark, iv.start)
		select {
		case b.marked <- struct{}{}:
		default:
		}
		return
	}
	if iv.kind > evRunq || iv.end <= iv.start {
		return
	}
	if b.filled {
		if old := b.recent[b.next]; old.end > b.keepFrom {
			b.lostAfter++
			b.lostMaxEnd = max(b.lostMaxEnd, old.end)
		}
	}
	b.recent[b.next] = iv
	if b.next++; b.next == len(b.recent) {
		b.next, b.filled = 0, true
	}
	if b.capturing && iv.end >= b.captureFrom {
		if len(b.seen) < maxSeen {
			b.seen[ikey{iv.tid, iv.kind, iv.start}] = struct{}{}
		} else {
			b.seenFull = true
		}
	}
	if b.open {
		b.addLocked(iv.tid, iv.kind, iv.start, iv.end)
	}
}

// addLocked adds the interval [start, end) (CLOCK_MONOTONIC ns) to the
// open pass, clipped to it. Whole microseconds are counted from the pass
// start, floored at both ends, so that adjacent intervals add up without
// rounding drift.
func (b *binner) addLocked(tid uint32, kind uint8, start, end uint64) {
	s := int64(start) + b.off - b.start
	e := int64(end) + b.off - b.start
	if e <= 0 || e <= s {
		return
	}
	s = max(s, 0)
	const limit = int64(MaxPassBins) * binNs
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
	if t == nil || b.lastTid != tid {
		if t = b.threads[tid]; t == nil {
			if len(b.threads) >= MaxBinThreads {
				b.dropLocked()
				return
			}
			t = &threadBins{}
			b.threads[tid] = t
		}
		b.lastTid, b.lastT = tid, t
	}
	for su < eu {
		bin := su / binUs
		hi := min(eu, (bin+1)*binUs)
		t.add(int(bin), kind, hi-su)
		su = hi
	}
}

func (b *binner) dropLocked() {
	b.capped++
	b.cappedTotal++
}

// begin opens a pass whose bin 0 starts at startUnix, replaying the
// events already read that end after it.
func (b *binner) begin(startUnix int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.beginLocked(startUnix)
}

func (b *binner) beginLocked(startUnix int64) {
	b.open, b.start, b.capped = true, startUnix, 0
	b.threads, b.lastT = make(map[uint32]*threadBins), nil
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
	for _, iv := range b.recent[:n] {
		if iv.end > from {
			b.addLocked(iv.tid, iv.kind, iv.start, iv.end)
		}
	}
}

// ensureOpen opens a pass where the last one ended, for End without Begin,
// and returns the open pass's start.
func (b *binner) ensureOpen() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		b.beginLocked(b.prevEnd)
	}
	return b.start
}

// capture starts remembering the events read from now on that end at or
// after from.
func (b *binner) capture(from uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.capturing, b.captureFrom = true, from
	b.seen, b.seenFull = make(map[ikey]struct{}), false
}

// marked reports whether the reader has read a mark written at or after
// at, that is every event submitted before that mark.
func (b *binner) markedSince(at uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mark >= at
}

// finish closes the open pass at endUnix with n bins. inProgress holds the
// intervals that had not ended when End read the stats map (running, or
// waiting on the run queue); one whose event the reader has meanwhile read
// is not added twice. It returns the bins of each thread that ran or
// waited in the pass (threadBins.arrays makes them the record's), and the
// number of intervals the pass lost.
func (b *binner) finish(endUnix int64, inProgress []interval) (map[uint32]*threadBins, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, iv := range inProgress {
		if _, ok := b.seen[ikey{iv.tid, iv.kind, iv.start}]; ok {
			continue
		}
		if b.seenFull {
			b.dropLocked() // cannot tell: leave it out
			continue
		}
		b.addLocked(iv.tid, iv.kind, iv.start, iv.end)
	}
	b.capturing, b.seen, b.seenFull = false, nil, false
	out := b.threads
	for tid, t := range out {
		if !t.any {
			delete(out, tid)
		}
	}
	capped := b.capped
	b.open, b.threads, b.lastT, b.capped = false, nil, nil, 0
	b.prevEnd = endUnix
	// Events that ended after this pass may belong to the next one.
	b.keepFrom, b.lostAfter, b.lostMaxEnd = b.toMono(endUnix), 0, 0
	if b.filled {
		if oldest := b.recent[b.next]; oldest.end > b.keepFrom {
			// Some of the overwritten events may have ended after it.
			b.lostAfter, b.lostMaxEnd = 1, oldest.end
		}
	}
	return out, capped
}

// totals returns the intervals lost to the bounds since Start and the
// reader's error, if it stopped.
func (b *binner) totals() (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cappedTotal, b.err
}

// endBinsLocked closes the pass's time bins and writes them to BinsFile.
// cur is End's snapshot (for the threads' processes and names).
func (p *Probe) endBinsLocked(ctx context.Context, per probe.Period, cur snapshot) error {
	b := p.bins
	start := b.ensureOpen()
	end := per.EndUnixNs
	if now := time.Now().UnixNano(); end <= start || end > now {
		end = now
	}
	n := min(int((end-start+binNs-1)/binNs), MaxPassBins)
	binsEnd := start + int64(n)*binNs
	var errs []error
	// The last bin is whole: wait until it is over.
	if d := time.Duration(binsEnd - time.Now().UnixNano()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			errs = append(errs, fmt.Errorf("sched: bins: %w", ctx.Err()))
		}
	}
	// The intervals in progress are read from the stats map: a thread on a
	// CPU since its last switch-in, or waiting on the run queue. Events
	// read from now on are remembered, so that an interval whose event
	// comes while the map is read is not counted twice (the BPF program
	// updates the entry before it submits the event).
	b.capture(bpf.MonoNow())
	st, err := p.snapshotLocked()
	if err != nil {
		errs = append(errs, err)
	}
	if err == nil {
		if err := p.drainLocked(ctx, st.iterAt); err != nil {
			errs = append(errs, err)
		}
	}
	binsEndMono := b.toMono(binsEnd)
	var inProgress []interval
	for tid, c := range st.threads {
		if c.gone != 0 {
			continue
		}
		if c.kflags&kOnCPU != 0 && c.lastIn != 0 {
			inProgress = append(inProgress, interval{tid, evOnCPU, c.lastIn, binsEndMono})
		}
		if c.kflags&kWaiting != 0 && c.enq != 0 && c.lastIn == 0 {
			inProgress = append(inProgress, interval{tid, evRunq, max(c.enq, c.lastOut), binsEndMono})
		}
	}
	out, dropped := b.finish(end, inProgress)
	if ring, err := p.ringDroppedLocked(); err != nil {
		errs = append(errs, err)
	} else {
		dropped += sub(ring, p.ringBase)
		p.ringBase = ring
	}
	threads := make(map[uint32]counters, len(out))
	for tid := range out {
		c, ok := cur.threads[tid]
		if !ok {
			c = st.threads[tid]
		}
		threads[tid] = c
	}
	for _, tid := range watch.ThreadOrder(threads, func(c counters) int { return int(c.tgid) }) {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		c := threads[tid]
		r := BinsRecord{
			Level: per.Level, Repeat: per.Repeat, Warmup: per.Warmup,
			PID: int(c.tgid), TID: int(tid),
			StartUnixNs: start, BinMs: BinMs,
			DroppedEvents: dropped,
		}
		// One thread's arrays at a time: a long pass of many threads
		// would hold 16 bytes a bin per thread as []int.
		r.OnCPUUs, r.RunqUs = out[tid].arrays(n)
		delete(out, tid)
		if r.Name = proctree.Comm(r.PID, r.TID); r.Name == "" {
			r.Name = c.comm
		}
		if err := p.out.Append(BinsFile, r); err != nil {
			return errors.Join(append(errs, fmt.Errorf("sched: writing %s: %w", BinsFile, err))...)
		}
	}
	return errors.Join(errs...)
}

// drainLocked waits until the reader has read the mark that the task
// iterator run at or after at wrote, that is every event submitted before
// it. The mark is lost when the ring buffer is full; the iterator is then
// run again for another.
func (p *Probe) drainLocked(ctx context.Context, at uint64) error {
	for try := 0; ; try++ {
		ok, err := p.waitMark(ctx, at, 250*time.Millisecond)
		if ok || err != nil {
			return err
		}
		if try == 3 {
			return errors.New("sched: bins: the ring buffer's reader did not catch up within 1 s")
		}
		at = bpf.MonoNow()
		if err := p.seedLocked(); err != nil {
			return err
		}
	}
}

func (p *Probe) waitMark(ctx context.Context, at uint64, d time.Duration) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for !p.bins.markedSince(at) {
		select {
		case <-p.bins.marked:
		case <-t.C:
			return false, nil
		case <-p.rdDone:
			_, err := p.bins.totals()
			return false, fmt.Errorf("sched: bins: the ring buffer's reader stopped: %w", err)
		case <-ctx.Done():
			return false, fmt.Errorf("sched: bins: %w", ctx.Err())
		}
	}
	return true, nil
}

// ringDroppedLocked returns how many events the BPF programs could not
// write to the ring buffer since Start.
func (p *Probe) ringDroppedLocked() (uint64, error) {
	var per []uint64
	if err := p.objs.RingDropped.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("sched: reading ring buffer drop counter: %w", err)
	}
	var n uint64
	for _, d := range per {
		n += d
	}
	return n, nil
}
