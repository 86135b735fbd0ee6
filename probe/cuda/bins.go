package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/trace/bundle"
)

// BinsFile is the bundle file of the per-thread time inside the driver's
// blocking calls: one BinsRecord per thread and pass.
const BinsFile = bundle.CUDABinsFile

// BinMs is the width of one time bin in milliseconds, the sched probe's
// (sched.BinMs): the two files' bins of one pass line up.
const BinMs = 10

// Bounds on what a pass holds in memory, the sched probe's. Intervals
// beyond them are dropped and counted (BinsRecord.DroppedEvents, Losses).
const (
	// MaxBinThreads is how many threads a pass keeps bins for: the first
	// ones to finish a blocking call in the pass.
	MaxBinThreads = 256
	// MaxPassBins is how many bins a pass keeps (30 minutes).
	MaxPassBins = 30 * 60 * 1000 / BinMs
)

// DefaultSyncSymbols are the driver functions timed when
// Config.SyncSymbols is empty: the calls that block the calling thread
// until the GPU has done something. cuMemcpyDtoH and cuMemcpy return only
// once the copy has completed (the CUDA driver API's "API synchronization
// behavior"); the Async copies are left out (they return at once for
// pinned memory). The _v2 names are what the headers map the calls to,
// _ptsz/_ptds the per-thread default stream's variants. A symbol the
// library lacks is skipped.
var DefaultSyncSymbols = []string{
	"cuStreamSynchronize", "cuStreamSynchronize_ptsz",
	"cuCtxSynchronize", "cuCtxSynchronize_v2",
	"cuEventSynchronize",
	"cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds",
	"cuMemcpy", "cuMemcpy_ptds",
}

// BinsRecord is one line of cuda_bins.jsonl: one thread over one pass, in
// bins of BinMs. Bin i covers [StartUnixNs + i·BinMs, StartUnixNs +
// (i+1)·BinMs), all bins whole, as in sched_bins.jsonl (the same start for
// the same pass). SyncUs[i] is the microseconds of bin i that the thread
// spent inside one of the timed blocking calls (Config.SyncSymbols),
// spinning or asleep; a call made inside another counts once.
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
	// SyncUs has ceil(pass wall / BinMs) bins (at most MaxPassBins).
	SyncUs []int `json:"sync_us"`
	// DroppedEvents is how many calls the pass lost (ring buffer or the
	// in-progress map full, over MaxBinThreads or MaxPassBins), over all
	// threads; 0 normally.
	DroppedEvents uint64 `json:"dropped_events"`
}

const (
	binNs     = BinMs * 1_000_000
	binUs     = BinMs * 1_000
	chunkBins = 1024    // bins allocated together (10 s)
	maxRecent = 1 << 14 // events kept for the next pass (recent)
	maxSeen   = 1 << 14 // events remembered while End reads the in-progress map
	eventSize = 40      // sizeof(struct sevent)
	batchSize = 256     // events handed to the binner under one lock
	commLen   = 16
)

// Indexes of the sync_stats counters (bpf/cuda.bpf.c).
const (
	statEntered  = 0
	statNoRoom   = 1
	statRingFull = 2
)

// interval is one blocking call of the BPF program, CLOCK_MONOTONIC ns.
type interval struct {
	tid, tgid  uint32
	start, end uint64
	comm       [commLen]byte
}

type ikey struct {
	tid   uint32
	start uint64
}

type chunk [chunkBins]uint16

type threadBins struct {
	tgid   uint32
	comm   [commLen]byte
	chunks []*chunk
	any    bool
}

func (t *threadBins) add(bin int, us int64) {
	ci := bin / chunkBins
	for len(t.chunks) <= ci {
		t.chunks = append(t.chunks, nil)
	}
	c := t.chunks[ci]
	if c == nil {
		c = new(chunk)
		t.chunks[ci] = c
	}
	v := &c[bin%chunkBins]
	*v = uint16(min(int64(*v)+us, math.MaxUint16))
	t.any = true
}

func (t *threadBins) array(n int) []int {
	out := make([]int, n)
	for ci, c := range t.chunks {
		if c == nil {
			continue
		}
		for j := range c {
			i := ci*chunkBins + j
			if i >= n {
				break
			}
			out[i] = int(c[j])
		}
	}
	return out
}

// binner splits the streamed calls into the bins of the open pass, as the
// sched probe's binner does with its intervals. The reader goroutine feeds
// it; Begin and End open and close passes. Times are converted from
// CLOCK_MONOTONIC to unix ns with one offset, taken at Start.
type binner struct {
	mu  sync.Mutex
	off int64 // unix ns − CLOCK_MONOTONIC ns

	open    bool
	start   int64 // unix ns of the open pass's bin 0
	threads map[uint32]*threadBins
	capped  uint64 // calls the open pass lost to the bounds
	added   uint64 // calls that fell in the open pass (sub-µs ones included)
	prevEnd int64  // unix ns where the last pass ended (at first: Start)

	// recent is a ring of the last events read, replayed into a pass that
	// begins before they ended (a call that ended between passes, or read
	// while End closed the previous pass). Overwritten events that ended
	// after keepFrom (the last pass's end; MaxUint64 while a pass is open)
	// are counted, for the next pass to charge when they fall in it.
	recent     []interval
	next       int
	filled     bool
	keepFrom   uint64
	lostAfter  uint64
	lostMaxEnd uint64

	// While End reads the in-progress map: the calls read that ended at or
	// after captureFrom, so that a call read both there and from the ring
	// buffer counts once.
	capturing   bool
	captureFrom uint64
	seen        map[ikey]struct{}
	seenFull    bool

	flushes uint64        // ErrFlushed seen by the reader
	flushed chan struct{} // poked at each

	cappedTotal uint64 // since Start
	err         error  // the reader's, once it stopped
}

func newBinner(off, startUnix int64) *binner {
	return &binner{
		off:     off,
		prevEnd: startUnix,
		recent:  make([]interval, maxRecent),
		flushed: make(chan struct{}, 1),
	}
}

func (b *binner) toMono(unixNs int64) uint64 {
	if m := unixNs - b.off; m > 0 {
		return uint64(m)
	}
	return 0
}

// decode reads one struct sevent.
func decode(raw []byte) interval {
	iv := interval{
		tid:   binary.LittleEndian.Uint32(raw[0:4]),
		tgid:  binary.LittleEndian.Uint32(raw[4:8]),
		start: binary.LittleEndian.Uint64(raw[8:16]),
		end:   binary.LittleEndian.Uint64(raw[16:24]),
	}
	copy(iv.comm[:], raw[24:40])
	return iv
}

// readEvents feeds b from rd until rd is closed, in batches of at most
// batchSize under one lock. A flush (rd.Flush) is counted once every
// event committed before it has been handed over.
func readEvents(rd *ringbuf.Reader, b *binner, done chan<- struct{}) {
	defer close(done)
	var rec ringbuf.Record
	batch := make([]interval, 0, batchSize)
	for {
		err := rd.ReadInto(&rec)
		if err == nil && len(rec.RawSample) >= eventSize {
			batch = append(batch, decode(rec.RawSample))
		}
		if len(batch) > 0 && (err != nil || rec.Remaining == 0 || len(batch) == cap(batch)) {
			b.events(batch)
			batch = batch[:0]
		}
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrFlushed):
			b.flush()
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

func (b *binner) flush() {
	b.mu.Lock()
	b.flushes++
	b.mu.Unlock()
	select {
	case b.flushed <- struct{}{}:
	default:
	}
}

func (b *binner) flushCount() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushes
}

// events takes events read from the ring buffer, in order.
func (b *binner) events(ivs []interval) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, iv := range ivs {
		b.eventLocked(iv)
	}
}

func (b *binner) eventLocked(iv interval) {
	if iv.end <= iv.start {
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
			b.seen[ikey{iv.tid, iv.start}] = struct{}{}
		} else {
			b.seenFull = true
		}
	}
	if b.open {
		b.addLocked(&iv)
	}
}

// addLocked adds the call [start, end) to the open pass, clipped to it, in
// whole microseconds counted from the pass start, floored at both ends.
func (b *binner) addLocked(iv *interval) {
	s := int64(iv.start) + b.off - b.start
	e := int64(iv.end) + b.off - b.start
	if e <= 0 || e <= s {
		return
	}
	s = max(s, 0)
	b.added++
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
	t := b.threads[iv.tid]
	if t == nil {
		if len(b.threads) >= MaxBinThreads {
			b.dropLocked()
			return
		}
		t = &threadBins{}
		b.threads[iv.tid] = t
	}
	t.tgid = iv.tgid
	if iv.comm[0] != 0 {
		t.comm = iv.comm
	}
	for su < eu {
		bin := su / binUs
		hi := min(eu, (bin+1)*binUs)
		t.add(int(bin), hi-su)
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
	b.open, b.start, b.capped, b.added = true, startUnix, 0, 0
	b.threads = make(map[uint32]*threadBins)
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
		if iv := &b.recent[i]; iv.end > from {
			b.addLocked(iv)
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

// finish closes the open pass at endUnix. inProgress holds the calls that
// had not returned when End read the in-progress map; one whose event the
// reader has meanwhile read is not added twice. It returns the bins of each
// thread that was inside a call in the pass, the calls the pass lost, and
// how many calls fell in it.
func (b *binner) finish(endUnix int64, inProgress []interval) (out map[uint32]*threadBins, capped, added uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range inProgress {
		iv := &inProgress[i]
		if _, ok := b.seen[ikey{iv.tid, iv.start}]; ok {
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
	for tid, t := range out {
		if !t.any {
			delete(out, tid)
		}
	}
	capped, added = b.capped, b.added
	b.open, b.threads, b.capped = false, nil, 0
	b.prevEnd = endUnix
	b.keepFrom, b.lostAfter, b.lostMaxEnd = b.toMono(endUnix), 0, 0
	if b.filled {
		if oldest := b.recent[b.next]; oldest.end > b.keepFrom {
			b.lostAfter, b.lostMaxEnd = 1, oldest.end
		}
	}
	return out, capped, added
}

// totals returns the calls lost to the bounds since Start and the
// reader's error, if it stopped.
func (b *binner) totals() (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cappedTotal, b.err
}

// syncStats are the BPF program's cumulative counters (sync_stats).
type syncStats struct {
	entered, noRoom, ringFull uint64
}

func (p *Probe) syncStatsLocked() (syncStats, error) {
	var s syncStats
	for i, dst := range []*uint64{&s.entered, &s.noRoom, &s.ringFull} {
		var per []uint64
		if err := p.objs.SyncStats.Lookup(uint32(i), &per); err != nil {
			return s, fmt.Errorf("cuda: reading sync counters: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return s, nil
}

// beginBinsLocked opens the pass's bins at start (unix ns).
func (p *Probe) beginBinsLocked(start int64) {
	p.bins.begin(start)
	if st, err := p.syncStatsLocked(); err == nil { // an error is reported by End
		p.syncBase = st
	}
}

// endBinsLocked closes the pass's bins and writes them to BinsFile.
func (p *Probe) endBinsLocked(ctx context.Context, per probe.Period) error {
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
			errs = append(errs, fmt.Errorf("cuda: bins: %w", ctx.Err()))
		}
	}
	st, err := p.syncStatsLocked()
	if err != nil {
		errs = append(errs, err)
	}
	// The calls in progress are read from the in-progress map; the events
	// read from now on are remembered, so that a call that returns
	// meanwhile (its event is submitted before its entry is deleted) is
	// not counted twice.
	binsEndMono := b.toMono(binsEnd)
	b.capture(bpf.MonoNow())
	inProgress, err := p.inProgressLocked(binsEndMono)
	if err != nil {
		errs = append(errs, err)
	}
	if err := p.drainLocked(ctx); err != nil {
		errs = append(errs, err)
	}
	out, dropped, added := b.finish(end, inProgress)
	d := syncStats{entered: sub(st.entered, p.syncBase.entered), noRoom: sub(st.noRoom, p.syncBase.noRoom), ringFull: sub(st.ringFull, p.syncBase.ringFull)}
	p.syncBase = st
	dropped += d.noRoom + d.ringFull
	tids := make([]uint32, 0, len(out))
	for tid := range out {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool {
		a, c := out[tids[i]], out[tids[j]]
		if a.tgid != c.tgid {
			return a.tgid < c.tgid
		}
		return tids[i] < tids[j]
	})
	for _, tid := range tids {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		t := out[tid]
		r := BinsRecord{
			Level: per.Level, Repeat: per.Repeat, Warmup: per.Warmup,
			PID: int(t.tgid), TID: int(tid),
			StartUnixNs: start, BinMs: BinMs,
			SyncUs:        t.array(n),
			DroppedEvents: dropped,
		}
		delete(out, tid)
		if r.Name = proctree.Comm(r.PID, r.TID); r.Name == "" {
			r.Name = commString(t.comm[:])
		}
		if err := p.out.Append(BinsFile, r); err != nil {
			return errors.Join(append(errs, fmt.Errorf("cuda: writing %s: %w", BinsFile, err))...)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, checkPass(d, added))
	}
	return errors.Join(errs...)
}

// checkPass says whether a pass whose threads entered d.entered blocking
// calls, of which added reached the bins, is a broken probe: on and
// attached, calls entered, and none of them came through. A pass whose
// calls all took under a microsecond has no line and no error.
func checkPass(d syncStats, added uint64) error {
	if added > 0 || d.entered == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %d blocking calls were entered in the pass but none reached %s (%d lost: in-progress map or ring buffer full)",
		d.entered, BinsFile, d.noRoom+d.ringFull)
}

// inProgressLocked returns the blocking calls in progress, as intervals
// that end at end (CLOCK_MONOTONIC ns), and forgets those of threads that
// have exited (a thread that died inside a call never returns from it).
func (p *Probe) inProgressLocked(end uint64) ([]interval, error) {
	var (
		tid  uint32
		v    cudaOpenCall
		out  []interval
		gone []uint32
	)
	it := p.objs.Inflight.Iterate()
	for it.Next(&tid, &v) {
		if proctree.Comm(int(v.Tgid), int(tid)) == "" {
			gone = append(gone, tid)
			continue
		}
		if v.StartNs < end {
			out = append(out, interval{tid: tid, tgid: v.Tgid, start: v.StartNs, end: end})
		}
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("cuda: reading the calls in progress: %w", err)
	}
	var errs []error
	for _, tid := range gone {
		if err := p.objs.Inflight.Delete(tid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("cuda: forgetting thread %d's call in progress: %w", tid, err))
		}
	}
	return out, errors.Join(errs...)
}

// drainLocked waits until the reader has read every event committed to
// the ring buffer before it was called.
func (p *Probe) drainLocked(ctx context.Context) error {
	f0 := p.bins.flushCount()
	if err := p.rd.Flush(); err != nil {
		return fmt.Errorf("cuda: bins: flushing the ring buffer: %w", err)
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for p.bins.flushCount() == f0 {
		select {
		case <-p.bins.flushed:
		case <-t.C:
			return errors.New("cuda: bins: the ring buffer's reader did not catch up within 1 s")
		case <-p.rdDone:
			_, err := p.bins.totals()
			return fmt.Errorf("cuda: bins: the ring buffer's reader stopped: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("cuda: bins: %w", ctx.Err())
		}
	}
	return nil
}

// commString returns a NUL-terminated thread name.
func commString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// sub returns a - b, or 0 when b > a.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
