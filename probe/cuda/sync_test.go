package cuda

import (
	"context"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/bpf"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

// buildSyncApp compiles testdata/stub.c as libcuda.so.1 and
// testdata/syncapp.c linked against it, in a temporary directory.
func buildSyncApp(t testing.TB) string {
	t.Helper()
	cc := need.Binary(t, "cc") // the C compiler that builds the stub libcuda (Debian's gcc)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-O1", "-o", filepath.Join(dir, "libcuda.so.1"), "testdata/stub.c"},
		{"-O1", "-o", filepath.Join(dir, "syncapp"), "testdata/syncapp.c", "-L" + dir, "-l:libcuda.so.1", "-Wl,-rpath," + dir, "-pthread"},
	} {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	return filepath.Join(dir, "syncapp")
}

// send writes one command byte to the app.
func (a *app) send(t *testing.T, c byte) {
	t.Helper()
	if _, err := a.stdin.Write([]byte{c}); err != nil {
		t.Fatal(err)
	}
}

func TestBinnerAdd(t *testing.T) {
	// off = 0: the monotonic clock is the unix clock.
	b := newBinner(0, 0)
	b.Begin(probe.Period{StartUnixNs: 1_000_000_000}) // bin 0 at 1 s
	var name [commLen]byte
	copy(name[:], "w")
	ms := uint64(time.Millisecond)
	b.Events([]interval{
		{Tid: 7, Meta: meta{5, name}, Start: 1000 * ms, End: 1025 * ms}, // bins 0, 1 whole, 2 half
		{Tid: 7, Meta: meta{tgid: 5}, Start: 990 * ms, End: 1001 * ms},  // before the pass: 1 ms of bin 0... already full
		{Tid: 8, Meta: meta{tgid: 5}, Start: 1032 * ms, End: 1033 * ms}, // 1 ms of bin 3
	}...)
	out, capped, added := b.Finish(1_040_000_000, []interval{
		{Tid: 8, Meta: meta{tgid: 5}, Start: 1035 * ms, End: 1040 * ms}, // in progress: 5 ms more of bin 3
		{Tid: 7, Meta: meta{tgid: 5}, Start: 1000 * ms, End: 1040 * ms}, // in progress, but its event was not seen: added (overlaps)
	})
	if capped != 0 || added != 5 {
		t.Errorf("capped %d, added %d; want 0, 5", capped, added)
	}
	got8 := out[8].Arrays(4)[0]
	if want := []int{0, 0, 0, 6000}; !reflect.DeepEqual(got8, want) {
		t.Errorf("thread 8: %v, want %v", got8, want)
	}
	if out[7].Meta.tgid != 5 || bpf.Comm(out[7].Meta.comm[:]) != "w" {
		t.Errorf("thread 7: pid %d, name %q", out[7].Meta.tgid, bpf.Comm(out[7].Meta.comm[:]))
	}

	// A call that ended after the pass is replayed into the next one,
	// clipped to its start; an in-progress call whose event came meanwhile
	// counts once.
	b.Events(interval{Tid: 9, Meta: meta{tgid: 5}, Start: 1035 * ms, End: 1052 * ms})
	b.Begin(probe.Period{StartUnixNs: 1_040_000_000})
	b.Capture(0)
	b.Events(interval{Tid: 9, Meta: meta{tgid: 5}, Start: 1055 * ms, End: 1058 * ms})
	out, _, _ = b.Finish(1_060_000_000, []interval{{Tid: 9, Meta: meta{tgid: 5}, Start: 1055 * ms, End: 1060 * ms}})
	if got, want := out[9].Arrays(2)[0], []int{10000, 5000}; !reflect.DeepEqual(got, want) {
		t.Errorf("thread 9 in the next pass: %v, want %v (12 ms replayed, + 3 ms once)", got, want)
	}
}

func TestBinnerBounds(t *testing.T) {
	b := newBinner(0, 0)
	b.Begin(probe.Period{StartUnixNs: 1})
	var ivs []interval
	for tid := range bins.MaxBinThreads + 3 {
		ivs = append(ivs, interval{Tid: uint32(tid + 1), Start: 1, End: 2_000_000})
	}
	b.Events(ivs...)
	out, capped, _ := b.Finish(10_000_000, nil)
	if len(out) != bins.MaxBinThreads || capped != 3 {
		t.Errorf("%d threads, %d dropped; want %d, 3", len(out), capped, bins.MaxBinThreads)
	}
	if total, _ := b.Totals(); total != 3 {
		t.Errorf("dropped since Start %d, want 3", total)
	}
}

// TestSyncBins runs the stand-in app's blocking calls under the probe and
// checks cuda_bins.jsonl: the sync thread's time inside them adds up to
// what the app timed around its calls, a call inside another counts once,
// a thread that never synchronizes has no line, the bins are whole bins of
// the pass, and a call in progress at the end of a pass is split between
// it and the next.
func TestSyncBins(t *testing.T) {
	need.Root(t, "to load BPF programs and attach uprobes")
	probetest.EnableStats(t)
	bin := buildSyncApp(t)
	const n, ms = 5, 20
	a := startApp(t, bin, n, ms)
	sink := &probetest.Sink{}
	p := startProbe(t, a.pid, sink)

	if d := p.Detail(); !strings.Contains(d, "counting 3 launch functions, timing 4 blocking calls") {
		t.Errorf("Detail %q: want the stand-in's 3 launch and 4 blocking functions", d)
	}
	passStart := time.Now().UnixNano()
	per := probe.Period{Level: "c1", Repeat: 1, StartUnixNs: passStart}
	p.Begin(per)
	a.send(t, 'r')
	var syncTID, workTID int
	var appNs int64
	if s := a.line(t); strings.TrimSpace(s) == "" {
		t.Fatal("app said nothing")
	} else if _, err := fmt.Sscanf(s, "done sync=%d work=%d ns=%d", &syncTID, &workTID, &appNs); err != nil {
		t.Fatalf("app said %q: %v", s, err)
	}
	per.EndUnixNs = time.Now().UnixNano()
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	recs, err := probetest.Decode[bundle.ThreadBins](sink, BinsFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d lines, want 1 (the sync thread's; asrp-work and main make no blocking call): %+v", len(recs), recs)
	}
	r := recs[0]
	wantBins := int((per.EndUnixNs - passStart + bins.BinNs - 1) / bins.BinNs)
	if r.TID != syncTID || r.PID != a.pid || r.Name != "asrp-sync" || r.Level != "c1" || r.Repeat != 1 ||
		r.StartUnixNs != passStart || r.BinMs != bins.BinMs || len(r.SyncUs) != wantBins || r.DroppedEvents != 0 {
		t.Errorf("record %+v: want tid %d pid %d asrp-sync, c1 repeat 1, start %d, %d bins of %d ms, nothing dropped",
			r, syncTID, a.pid, passStart, wantBins, bins.BinMs)
	}
	total := 0
	for i, us := range r.SyncUs {
		if us < 0 || us > bins.BinUs {
			t.Errorf("bin %d: %d µs, want 0..%d", i, us, bins.BinUs)
		}
		total += us
	}
	// Nominal: 5 calls a round, each MS (the copy's inner synchronize
	// counted once); the app's own clock around the calls includes the
	// uprobe traps, two a call and 3-15 µs each here, and nanosleep's
	// overshoot, which reached 2 ms a call on this 2-core VM under load.
	nominal := n * 5 * ms * 1000
	probed := float64(total)
	appUs := float64(appNs) / 1000
	t.Logf("sync thread: %d µs inside blocking calls (probe), %.0f µs timed by the app, nominal %d µs", total, appUs, nominal)
	if total < nominal {
		t.Errorf("probe: %d µs inside the calls, less than the %d µs they slept", total, nominal)
	}
	// The probe's intervals lie inside the app's timing of the same calls:
	// it may miss only the traps and the calls' own prologue (bound: 100 µs
	// a call; measured 17 µs a call here, 335 µs over the 20). The
	// synchronize inside cuMemcpyDtoH_v2 counted twice would add ≥ 100 ms.
	if probed > appUs+1 || appUs-probed > 4*n*100 {
		t.Errorf("probe %d µs against %.0f µs timed by the app: want at most the app's (more: a nested call counted twice), and within %d µs of it", total, appUs, 4*n*100)
	}
	// Bins outside the calls' span stay empty: none before the first bin
	// the app could have synchronized in.
	if r.SyncUs[len(r.SyncUs)-1] > bins.BinUs {
		t.Errorf("last bin %d µs", r.SyncUs[len(r.SyncUs)-1])
	}

	// A call in progress at End: counted up to the end of the pass's bins,
	// and the rest in the next pass.
	per2 := probe.Period{Level: "c1", Repeat: 2, StartUnixNs: time.Now().UnixNano()}
	p.Begin(per2)
	a.send(t, 'l')
	var longTID int
	if _, err := fmt.Sscanf(a.line(t), "long sync=%d", &longTID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	per2.EndUnixNs = time.Now().UnixNano()
	if err := p.End(context.Background(), per2); err != nil {
		t.Fatalf("End: %v", err)
	}
	per3 := probe.Period{Level: "c1", Repeat: 3, StartUnixNs: per2.EndUnixNs}
	p.Begin(per3)
	var longNs int64
	if _, err := fmt.Sscanf(a.line(t), "long done ns=%d", &longNs); err != nil {
		t.Fatal(err)
	}
	per3.EndUnixNs = time.Now().UnixNano()
	if err := p.End(context.Background(), per3); err != nil {
		t.Fatalf("End: %v", err)
	}
	recs, err = probetest.Decode[bundle.ThreadBins](sink, BinsFile)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[int]int{}
	var overlapUs float64 // pass 2's last bin reaches past pass 3's start: both count that stretch
	for _, r := range recs[1:] {
		if r.Repeat == 2 {
			overlapUs = float64(r.StartUnixNs+int64(len(r.SyncUs))*bins.BinNs-per3.StartUnixNs) / 1000
		}
		if r.TID != longTID {
			t.Errorf("pass %d: a line for thread %d, want only %d", r.Repeat, r.TID, longTID)
		}
		for _, us := range r.SyncUs {
			sums[r.Repeat] += us
		}
	}
	t.Logf("long call: %d µs in pass 2, %d µs in pass 3 (%.0f µs of them in both), %.0f µs timed by the app", sums[2], sums[3], overlapUs, float64(longNs)/1000)
	if sums[2] < 30_000 || sums[3] < 30_000 {
		t.Errorf("the long call: %d µs in pass 2 and %d in pass 3, want some of it in both", sums[2], sums[3])
	}
	if got, want := float64(sums[2]+sums[3])-overlapUs, float64(longNs)/1000; got > want+2 || want-got > 400 {
		t.Errorf("the long call: %.0f µs over both passes, want the app's %.0f µs (within 400 µs)", got, want)
	}
	o, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the blocking calls' BPF programs: %d runs, %.0f ns a run", o.SyncRuns, float64(o.SyncRuntime.Nanoseconds())/float64(max(o.SyncRuns, 1)))
	if o.SyncRuns != 2*(4*n+n+1) {
		t.Errorf("the entry and return programs ran %d times, want %d (2 per call, the nested ones too)", o.SyncRuns, 2*(4*n+n+1))
	}
	if o.SyncDropped+o.BinsDropped != 0 || p.Losses() != "" {
		t.Errorf("losses: %+v %q", o, p.Losses())
	}
}

func TestCheckPass(t *testing.T) {
	for _, tc := range []struct {
		d     syncStats
		added uint64
		fail  bool
	}{
		{syncStats{}, 0, false},                       // no blocking call: idle
		{syncStats{entered: 12}, 12, false},           // all came through
		{syncStats{entered: 12}, 1, false},            // some (a call still in progress at the next pass)
		{syncStats{entered: 12}, 0, true},             // none: broken
		{syncStats{entered: 3, ringFull: 3}, 0, true}, // all lost: said
	} {
		err := checkPass(tc.d, tc.added)
		if (err != nil) != tc.fail {
			t.Errorf("checkPass(%+v, %d) = %v, want failure %v", tc.d, tc.added, err, tc.fail)
		}
	}
}

// TestSyncEnteredNothingWritten: a probe whose intervals never reach the
// bins while the app synchronizes fails End instead of writing nothing.
func TestSyncEnteredNothingWritten(t *testing.T) {
	need.Root(t, "to load BPF programs and attach uprobes")
	bin := buildSyncApp(t)
	a := startApp(t, bin, 1, 5)
	sink := &probetest.Sink{}
	p := startProbe(t, a.pid, sink)
	per := probe.Period{Level: "c1", Repeat: 1}
	p.Begin(per)
	// Break the pipe: the reader stops, as if the ring buffer were lost.
	p.mu.Lock()
	if err := p.bins.Close(); err != nil {
		t.Fatal(err)
	}
	p.mu.Unlock()
	a.send(t, 'r')
	a.line(t)
	err := p.End(context.Background(), per)
	t.Logf("End: %v", err)
	if err == nil || !strings.Contains(err.Error(), "ring buffer") {
		t.Errorf("End with a dead reader after 5 blocking calls: %v, want an error", err)
	}
	if len(sink.Lines(BinsFile)) != 0 {
		t.Errorf("lines written: %d", len(sink.Lines(BinsFile)))
	}
}
