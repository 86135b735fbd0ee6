package sched

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// BinsFile is the bundle file of the per-thread time bins: one bundle.ThreadBins
// per thread and pass.
const BinsFile = bundle.SchedBinsFile

// BinMs is the width of one time bin in milliseconds.
const BinMs = bins.BinMs

// Kinds of event (EV_* in bpf/sched.bpf.c).
const (
	evOnCPU = 0
	evRunq  = 1
	evMark  = 2
)

// interval is an event of the BPF program (struct event), CLOCK_MONOTONIC
// ns; binner bins them, one array per kind (evOnCPU, evRunq).
type (
	interval = bins.Interval[struct{}]
	binner   = bins.Binner[struct{}]
)

func newBinner(off, startUnix int64) *binner {
	return bins.New(bins.Config[struct{}]{
		Name: "sched", Kinds: 2,
		Recent: 1 << 16, // events kept for the next pass
		Seen:   1 << 16, // events remembered while End reads the map
		Size:   24,      // sizeof(struct event)
		Decode: func(raw []byte) interval {
			iv := interval{
				Tid:   binary.LittleEndian.Uint32(raw[0:4]),
				Kind:  raw[4],
				Start: binary.LittleEndian.Uint64(raw[8:16]),
				End:   binary.LittleEndian.Uint64(raw[16:24]),
			}
			if iv.Kind == evMark {
				iv.Kind = bins.Mark
			}
			return iv
		},
	}, off, startUnix)
}

// endBinsLocked closes the pass's time bins and writes them to BinsFile.
// cur is End's snapshot (for the threads' processes and names).
func (p *Probe) endBinsLocked(ctx context.Context, per probe.Period, cur snapshot) error {
	b := p.bins
	ps, err := b.Ending(ctx, per.EndUnixNs)
	errs := []error{err}
	// The intervals in progress are read from the stats map: a thread on a
	// CPU since its last switch-in, or waiting on the run queue. Events
	// read from now on are remembered, so that an interval whose event
	// comes while the map is read is not counted twice (the BPF program
	// updates the entry before it submits the event).
	b.Capture(bpf.MonoNow())
	st, err := p.snapshotLocked()
	if err == nil {
		err = p.drainLocked(ctx, st.iterAt)
	}
	errs = append(errs, err)
	var inProgress []interval
	for tid, c := range st.threads {
		if c.gone != 0 {
			continue
		}
		if c.Kflags&kOnCPU != 0 && c.LastIn != 0 {
			inProgress = append(inProgress, interval{Tid: tid, Kind: evOnCPU, Start: c.LastIn, End: ps.BinsEndMono})
		}
		if c.Kflags&kWaiting != 0 && c.EnqTs != 0 && c.LastIn == 0 {
			inProgress = append(inProgress, interval{Tid: tid, Kind: evRunq, Start: max(c.EnqTs, c.LastOut), End: ps.BinsEndMono})
		}
	}
	out, dropped, _ := b.Finish(ps.End, inProgress)
	if ring, err := p.ringDroppedLocked(); err != nil {
		errs = append(errs, err)
	} else {
		dropped += watch.Sub(ring, p.ringBase)
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
	for _, tid := range watch.ThreadOrder(threads, func(c counters) int { return int(c.Tgid) }) {
		c := threads[tid]
		r := ps.Head(per, int(c.Tgid), tid, c.comm)
		r.DroppedEvents = dropped
		// One thread's arrays at a time: a long pass of many threads
		// would hold 16 bytes a bin per thread as []int.
		a := out[tid].Arrays(ps.N)
		r.OnCPUUs, r.RunqUs = a[evOnCPU], a[evRunq]
		delete(out, tid)
		if err := watch.Append(ctx, p.out, "sched", BinsFile, r); err != nil {
			return errors.Join(append(errs, err)...)
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
		ok, err := p.bins.WaitMark(ctx, at, 250*time.Millisecond)
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

// ringDroppedLocked returns how many events the BPF programs could not
// write to the ring buffer since Start.
func (p *Probe) ringDroppedLocked() (uint64, error) {
	var n uint64
	if err := bpf.Counters(p.objs.RingDropped, &n); err != nil {
		return 0, fmt.Errorf("sched: reading ring buffer drop counter: %w", err)
	}
	return n, nil
}
