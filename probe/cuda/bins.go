package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// BinsFile is the bundle file of the per-thread time inside the driver's
// blocking calls: one bundle.ThreadBins per thread and pass.
const BinsFile = bundle.CUDABinsFile

// DefaultSyncSymbols are the driver functions timed, their time binned
// into cuda_bins.jsonl: the calls that block the calling thread
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

const commLen = 16

// meta is what the bins keep of a thread from its calls.
type meta struct {
	tgid uint32
	comm [commLen]byte
}

// interval is one blocking call of the BPF program (struct sevent),
// CLOCK_MONOTONIC ns; binner bins them, one kind.
type (
	interval = bins.Interval[meta]
	binner   = bins.Binner[meta]
)

func newBinner(off, startUnix int64) *binner {
	return bins.New(bins.Config[meta]{
		Name: "cuda", Kinds: 1,
		Recent: 1 << 14, // events kept for the next pass
		Seen:   1 << 14, // events remembered while End reads the in-progress map
		Size:   40,      // sizeof(struct sevent)
		Decode: decode,
		Merge: func(t, iv *meta) {
			t.tgid = iv.tgid
			if iv.comm[0] != 0 {
				t.comm = iv.comm
			}
		},
	}, off, startUnix)
}

// decode reads one struct sevent.
func decode(raw []byte) interval {
	iv := interval{
		Tid:   binary.LittleEndian.Uint32(raw[0:4]),
		Meta:  meta{tgid: binary.LittleEndian.Uint32(raw[4:8])},
		Start: binary.LittleEndian.Uint64(raw[8:16]),
		End:   binary.LittleEndian.Uint64(raw[16:24]),
	}
	copy(iv.Meta.comm[:], raw[24:40])
	return iv
}

// syncStats are the BPF program's cumulative counters (sync_stats, in
// the order of their indexes in bpf/cuda.bpf.c).
type syncStats struct {
	entered, noRoom, ringFull uint64
}

func (p *Probe) syncStatsLocked() (syncStats, error) {
	var s syncStats
	if err := bpf.Counters(p.objs.SyncStats, &s.entered, &s.noRoom, &s.ringFull); err != nil {
		return s, fmt.Errorf("cuda: reading sync counters: %w", err)
	}
	return s, nil
}

// endBinsLocked closes the pass's bins and writes them to BinsFile.
func (p *Probe) endBinsLocked(ctx context.Context, per probe.Period) error {
	b := p.bins
	ps, err := b.Ending(ctx, per.EndUnixNs)
	st, serr := p.syncStatsLocked()
	errs := []error{err, serr}
	// The calls in progress are read from the in-progress map; the events
	// read from now on are remembered, so that a call that returns
	// meanwhile (its event is submitted before its entry is deleted) is
	// not counted twice.
	b.Capture(bpf.MonoNow())
	inProgress, err := p.inProgressLocked(ps.BinsEndMono)
	errs = append(errs, err, b.Drain(ctx))
	out, dropped, added := b.Finish(ps.End, inProgress)
	d := syncStats{entered: watch.Sub(st.entered, p.syncBase.entered), noRoom: watch.Sub(st.noRoom, p.syncBase.noRoom), ringFull: watch.Sub(st.ringFull, p.syncBase.ringFull)}
	p.syncBase = st
	dropped += d.noRoom + d.ringFull
	for _, tid := range watch.ThreadOrder(out, func(t *bins.Thread[meta]) int { return int(t.Meta.tgid) }) {
		t := out[tid]
		r := ps.Head(per, int(t.Meta.tgid), tid, bpf.Comm(t.Meta.comm[:]))
		r.SyncUs, r.DroppedEvents = t.Arrays(ps.N)[0], dropped
		delete(out, tid)
		if err := watch.Append(ctx, p.out, "cuda", BinsFile, r); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return checkPass(d, added)
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
		out  []interval
		gone []uint32
	)
	err := bpf.Each(p.objs.Inflight, func(tid uint32, v cudaOpenCall) {
		if proctree.Comm(int(v.Tgid), int(tid)) == "" {
			gone = append(gone, tid)
		} else if v.StartNs < end {
			out = append(out, interval{Tid: tid, Meta: meta{tgid: v.Tgid}, Start: v.StartNs, End: end})
		}
	})
	if err != nil {
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
