package bins

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/asrprof/asrprof/probe"
)

const ms = int64(time.Millisecond)

type iv = Interval[struct{}]

// at returns the CLOCK_MONOTONIC ns of unix time us µs, for a binner made
// with newTest (unix = CLOCK_MONOTONIC + 1 s).
func at(us int64) uint64 { return uint64(us*1000 - 1000*ms) }

func newTest(recent, seen int) *Binner[struct{}] {
	return New(Config[struct{}]{Name: "test", Kinds: 2, Recent: recent, Seen: seen}, 1000*ms, 1500*ms)
}

// arrays returns each thread's n bins, kind by kind.
func arrays[M any](threads map[uint32]*Thread[M], n int) map[uint32][][]int {
	out := make(map[uint32][][]int)
	for tid, t := range threads {
		out[tid] = t.Arrays(n)
	}
	return out
}

func TestBinner(t *testing.T) {
	ctx := context.Background()
	b := newTest(64, 64)
	b.Begin(probe.Period{StartUnixNs: 2000 * ms})
	b.Events(
		// From 5 ms before the pass (cut) to 13.5 ms in: bin 0 whole,
		// 3.5 ms of bin 1; then 2.5 ms of kind 1.
		iv{Tid: 1, Kind: 0, Start: at(1_995_000), End: at(2_013_500)},
		iv{Tid: 1, Kind: 1, Start: at(2_013_500), End: at(2_016_000)},
		// Ignored: a kind over Config.Kinds, an empty interval.
		iv{Tid: 3, Kind: 2, Start: at(2_000_000), End: at(2_005_000)},
		iv{Tid: 3, Kind: 0, Start: at(2_005_000), End: at(2_005_000)},
	)
	// Sub-microsecond intervals add up without drift: 1000 of 0.6 µs.
	for i := range int64(1000) {
		s := at(2_020_000) + uint64(i*600)
		b.Events(iv{Tid: 5, Kind: 1, Start: s, End: s + 600})
	}
	// End: the pass ends at 32 ms, its bins (4, whole) at 40 ms.
	p, err := b.Ending(ctx, 2032*ms)
	if want := (Pass{Start: 2000 * ms, End: 2032 * ms, BinsEnd: 2040 * ms, BinsEndMono: at(2_040_000), N: 4}); p != want || err != nil {
		t.Errorf("Ending: %+v, %v; want %+v", p, err, want)
	}
	// The intervals in progress are read: thread 1's since 16 ms, whose
	// event comes meanwhile (counted once, to 31 ms, across bins 1-3), and
	// thread 2's since 25 ms, across bins 2 and 3 to the bins' end.
	b.Capture(at(2_030_000))
	b.Events(iv{Tid: 1, Kind: 0, Start: at(2_016_000), End: at(2_031_000)})
	b.Events(iv{Tid: 99, Kind: Mark, Start: at(2_034_000)})
	if ok, err := b.WaitMark(ctx, at(2_033_500), 0); !ok || err != nil {
		t.Errorf("mark at 34 ms not read by 33.5 ms: %v", err)
	}
	if ok, _ := b.WaitMark(ctx, at(2_035_000), 0); ok {
		t.Errorf("mark at 34 ms read by 35 ms")
	}
	out, capped, added := b.Finish(p.End, []iv{
		{Tid: 1, Kind: 0, Start: at(2_016_000), End: p.BinsEndMono},
		{Tid: 2, Kind: 0, Start: at(2_025_000), End: p.BinsEndMono},
	})
	want := map[uint32][][]int{
		1: {{10000, 3500 + 4000, 10000, 1000}, {0, 2500, 0, 0}},
		2: {{0, 0, 5000, 10000}, {0, 0, 0, 0}},
		5: {{0, 0, 0, 0}, {0, 0, 600, 0}},
	}
	if got := arrays(out, p.N); !reflect.DeepEqual(got, want) || capped != 0 || added != 1004 {
		t.Errorf("pass 1: %v, capped %d, added %d;\nwant %v, 0, 1004", got, capped, added, want)
	}

	// Thread 2's call returns at 47 ms, after the pass: its event is
	// replayed into the next pass, from 40 ms; one that ended before that
	// is left out.
	b.Events(
		iv{Tid: 2, Kind: 0, Start: at(2_025_000), End: at(2_047_000)},
		iv{Tid: 4, Kind: 0, Start: at(2_033_000), End: at(2_038_000)},
	)
	b.Begin(probe.Period{StartUnixNs: 2040 * ms})
	b.Events(iv{Tid: 2, Kind: 1, Start: at(2_047_000), End: at(2_052_300)})
	out, _, _ = b.Finish(2060*ms, nil)
	want = map[uint32][][]int{2: {{7000, 0}, {3000, 2300}}}
	if got := arrays(out, 2); !reflect.DeepEqual(got, want) {
		t.Errorf("pass 2: %v, want %v", got, want)
	}

	// End without Begin: the pass starts where the last one ended, with
	// what ended after it.
	b.Events(iv{Tid: 6, Kind: 1, Start: at(2_055_000), End: at(2_061_000)})
	if s := b.EnsureOpen(); s != 2060*ms {
		t.Errorf("pass 3 starts at %d, want %d", s, 2060*ms)
	}
	out, _, _ = b.Finish(2065*ms, nil)
	if got, w := arrays(out, 1), map[uint32][][]int{6: {{0}, {1000}}}; !reflect.DeepEqual(got, w) {
		t.Errorf("pass 3: %v, want %v", got, w)
	}

	// Bounded: threads over MaxBinThreads and time past MaxPassBins are
	// counted, not kept.
	b.Begin(probe.Period{StartUnixNs: 3000 * ms})
	for tid := range uint32(MaxBinThreads + 2) {
		b.Events(iv{Tid: tid + 1, Kind: 0, Start: at(3_000_000), End: at(3_001_000)})
	}
	end := int64(3000+MaxPassBins*BinMs) * 1000
	b.Events(iv{Tid: 1, Kind: 1, Start: at(end - 1000), End: at(end + 5000)})
	b.Events(iv{Tid: 1, Kind: 1, Start: at(end + 1000), End: at(end + 5000)})
	out, capped, _ = b.Finish(end/1000*ms, nil)
	if len(out) != MaxBinThreads || capped != 4 {
		t.Errorf("%d threads kept, %d dropped; want %d and 4", len(out), capped, MaxBinThreads)
	}
	if _, ok := out[MaxBinThreads+1]; ok {
		t.Errorf("thread %d kept, over MaxBinThreads", MaxBinThreads+1)
	}
	if r := out[1].Arrays(MaxPassBins)[1]; r[MaxPassBins-1] != 1000 {
		t.Errorf("interval across the last bin: last %d µs; want 1000", r[MaxPassBins-1])
	}
	if n, err := b.Totals(); n != 4 || err != nil {
		t.Errorf("dropped since Start %d (%v), want 4", n, err)
	}
}

// TestBinnerLosses: an interval in progress that cannot be told from one
// read meanwhile (too many read) is dropped, and so are the events
// between passes pushed out of the ring (recent) when they would fall in
// the next pass.
func TestBinnerLosses(t *testing.T) {
	b := newTest(2, 1)
	b.Begin(probe.Period{StartUnixNs: 2000 * ms})
	b.Capture(0)
	b.Events(
		iv{Tid: 1, Kind: 0, Start: at(2_001_000), End: at(2_002_000)},
		iv{Tid: 2, Kind: 0, Start: at(2_003_000), End: at(2_004_000)}, // over Seen
	)
	out, capped, _ := b.Finish(2010*ms, []iv{
		{Tid: 1, Kind: 0, Start: at(2_001_000), End: at(2_010_000)}, // seen: not again
		{Tid: 3, Kind: 0, Start: at(2_005_000), End: at(2_010_000)}, // cannot tell
	})
	want := map[uint32][][]int{1: {{1000}, {0}}, 2: {{1000}, {0}}}
	if got := arrays(out, 1); !reflect.DeepEqual(got, want) || capped != 1 {
		t.Errorf("pass 1: %v, capped %d; want %v, 1", got, capped, want)
	}
	// Three events after the pass in a ring of two: the first is lost,
	// charged to a pass that it would have fallen in.
	b.Events(
		iv{Tid: 4, Kind: 0, Start: at(2_011_000), End: at(2_012_000)},
		iv{Tid: 5, Kind: 0, Start: at(2_011_000), End: at(2_013_000)},
		iv{Tid: 6, Kind: 0, Start: at(2_011_000), End: at(2_014_000)},
	)
	b.Begin(probe.Period{StartUnixNs: 2010 * ms})
	out, capped, _ = b.Finish(2020*ms, nil)
	if len(out) != 2 || out[4] != nil || capped != 1 {
		t.Errorf("pass 2: threads %v, capped %d; want 5 and 6, 1", arrays(out, 1), capped)
	}
	// Not to one that begins after it ended.
	b.Events(
		iv{Tid: 4, Kind: 0, Start: at(2_021_000), End: at(2_022_000)},
		iv{Tid: 5, Kind: 0, Start: at(2_021_000), End: at(2_030_000)},
		iv{Tid: 6, Kind: 0, Start: at(2_021_000), End: at(2_030_000)},
	)
	b.Begin(probe.Period{StartUnixNs: 2025 * ms})
	out, capped, _ = b.Finish(2030*ms, nil)
	if got, w := arrays(out, 1), (map[uint32][][]int{5: {{5000}, {0}}, 6: {{5000}, {0}}}); !reflect.DeepEqual(got, w) || capped != 0 {
		t.Errorf("pass 3: %v, capped %d; want %v, 0", got, capped, w)
	}
	if n, _ := b.Totals(); n != 2 {
		t.Errorf("dropped since Start %d, want 2", n)
	}
}

// TestBinnerMerge: one kind; a thread's Meta comes from its intervals
// that reach the bins.
func TestBinnerMerge(t *testing.T) {
	b := New(Config[int]{Name: "test", Kinds: 1, Recent: 8, Seen: 8, Merge: func(t, iv *int) { *t = max(*t, *iv) }}, 0, 0)
	b.Begin(probe.Period{StartUnixNs: 1000 * ms})
	b.Events(
		Interval[int]{Meta: 3, Tid: 7, Start: uint64(1005 * ms), End: uint64(1012 * ms)},
		Interval[int]{Meta: 9, Tid: 7, Start: uint64(1012 * ms), End: uint64(1012*ms + 500)},      // under 1 µs: no bins
		Interval[int]{Meta: 5, Tid: 7, Kind: 1, Start: uint64(1013 * ms), End: uint64(1014 * ms)}, // no such kind
	)
	out, _, added := b.Finish(1020*ms, nil)
	if got := out[7].Arrays(2); !reflect.DeepEqual(got, [][]int{{5000, 2000}}) || out[7].Meta != 3 || added != 2 {
		t.Errorf("thread 7: %v meta %d, added %d; want [[5000 2000]] 3, 2", got, out[7].Meta, added)
	}
}

func TestBeginPeriod(t *testing.T) {
	b := newTest(4, 4)
	b.Begin(probe.Period{StartUnixNs: 2000 * ms})
	if got := b.EnsureOpen(); got != 2000*ms {
		t.Errorf("pass opened at %d, want Period.StartUnixNs %d", got, 2000*ms)
	}
	before := time.Now().UnixNano()
	b.Begin(probe.Period{})
	if got := b.EnsureOpen(); got < before || got > time.Now().UnixNano() {
		t.Errorf("pass without a start opened at %d, want now (%d)", got, before)
	}
}
