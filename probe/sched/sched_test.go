package sched

import (
	"context"
	"errors"
	"github.com/asrprof/asrprof/bundle"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestMain(m *testing.M) {
	probetest.RunWorkloadIfChild()
	runPingPongIfChild()
	os.Exit(m.Run())
}

func TestAccumulate(t *testing.T) {
	// Seen by the iterator of this read (iterAt 1000): alive.
	running := schedTstat{KernCpuNs: 600, KernRunqNs: 50, RunqNs: 40, Kflags: kRunq, SeenNs: 1000, StartNs: 7, Tgid: 7}
	if c := accumulate(&running, 1500, 1000); c.KernCpuNs != 600 || c.rqWait != 50 || c.gone != 0 || c.StartNs != 7 || c.Tgid != 7 {
		t.Errorf("running thread: %+v, want the kernel's 600 on-CPU and 50 waited, not gone", c)
	}
	noSchedInfo := running
	noSchedInfo.Kflags = 0
	if c := accumulate(&noSchedInfo, 1500, 1000); c.rqWait != 40 {
		t.Errorf("kernel without sched_info: rqWait=%d, want the events' 40", c.rqWait)
	}
	waiting := schedTstat{KernRunqNs: 10, Kflags: kRunq | kWaiting, SeenNs: 1000, LastOut: 900, EnqTs: 1100}
	if c := accumulate(&waiting, 1500, 1000); c.rqWait != 410 {
		t.Errorf("runnable thread: rqWait=%d, want 410 (10 + wait in progress since 1100)", c.rqWait)
	}
	stale := waiting
	stale.EnqTs, stale.LastOut = 200, 1300 // wake-up older than the last switch-out: an event was missed
	if c := accumulate(&stale, 1500, 1000); c.rqWait != 210 {
		t.Errorf("stale wake-up: rqWait=%d, want 210 (10 + wait since the switch-out at 1300)", c.rqWait)
	}
	blocked := waiting
	blocked.Kflags = kRunq
	if c := accumulate(&blocked, 1500, 1000); c.rqWait != 10 {
		t.Errorf("blocked thread: rqWait=%d, want 10 (no wait in progress)", c.rqWait)
	}
	// Not seen by this read's iterator: exited at its last switch-out.
	exited := schedTstat{KernCpuNs: 300, SeenNs: 800, LastOut: 850, EnqTs: 840, Kflags: kWaiting}
	if c := accumulate(&exited, 1500, 1000); c.gone != 850 || c.KernCpuNs != 300 || c.rqWait != 0 {
		t.Errorf("exited thread: %+v, want gone at 850 with 300 on-CPU and no wait in progress", c)
	}
	copy(exited.Comm[:], []int8{'a', 'b', 0, 'x'})
	if c := accumulate(&exited, 0, 0); c.comm != "ab" {
		t.Errorf("comm = %q, want ab", c.comm)
	}
}

func TestDiff(t *testing.T) {
	b := counters{schedTstat: schedTstat{KernCpuNs: 1e9, Voluntary: 5, RunqCount: 1}}
	a := counters{schedTstat: schedTstat{KernCpuNs: 2.5e9, Voluntary: 8, Involuntary: 2, RunqCount: 11}, rqWait: 40e3}
	a.Hist[3] = 10 // 10 waits in [4,8) µs since b
	r := diff(a, b, 10e9, 12e9)
	want := bundle.SchedRecord{CPUSec: 1.5, WallSec: 2, Utilization: 0.75, SchedRunq: &bundle.SchedRunq{OffCPUSec: 0.5, RunqP50us: 6, RunqP99us: 7.96,
		RunqCount: 10}, RunqWaitSec: 40e-6, RunqHist: []uint64{0, 0, 0, 10}, Voluntary: 3, Involuntary: 2, Source: "ebpf"}
	if r.RunqP99us < 7.95 || r.RunqP99us > 7.97 {
		t.Errorf("p99 = %g, want 7.96", r.RunqP99us)
	}
	r.RunqP99us = want.RunqP99us
	if !reflect.DeepEqual(r, want) {
		t.Errorf("diff = %+v\nwant   %+v", r, want)
	}
	// Born half a second into the period, exited a second later, 0.25 s on
	// a CPU: off-CPU for 0.75 s of the 1 s it lived.
	short := counters{schedTstat: schedTstat{KernCpuNs: 0.25e9, StartNs: 10.5e9}, gone: 11.5e9}
	if r := diff(short, counters{}, 10e9, 12e9); r.OffCPUSec != 0.75 || r.CPUSec != 0.25 || r.WallSec != 2 {
		t.Errorf("short-lived thread: %+v, want cpu_s 0.25, offcpu_s 0.75, wall_s 2", r)
	}
	// A counter that went backwards (reused tid) gives 0, not a huge number.
	if r := diff(b, a, 0, 1e9); r.Voluntary != 0 || r.CPUSec != 0 {
		t.Errorf("backwards diff = %+v, want zeros", r)
	}
}

// startProbe starts a sched probe on w, skipping when this machine does not
// allow eBPF.
func startProbe(t *testing.T, w *probetest.Workload, sink *probetest.Sink) *Probe {
	t.Helper()
	need.Root(t, "to load BPF programs")
	p := New()
	probetest.Start(t, p, probe.Target{PID: w.PID}, sink, "eBPF not permitted here")
	return p
}

func TestBusyAndIdleThreads(t *testing.T) {
	w := probetest.StartWorkload(t)
	sink := &probetest.Sink{}
	p := startProbe(t, w, sink)

	per := probe.Period{Level: "c1", Repeat: 2}
	// The kernel's own accounting of the busy thread over the same period,
	// to tell the probe's error from contention on a shared machine.
	kt0 := time.Now()
	k0, kerr0 := proctree.ReadSchedstat(w.PID, w.BusyTID)
	lost0 := hostLostSeconds()
	p.Begin(per)
	time.Sleep(1500 * time.Millisecond)
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	k1, kerr1 := proctree.ReadSchedstat(w.PID, w.BusyTID)
	kernelWall := time.Since(kt0).Seconds()
	lost := hostLostSeconds() - lost0
	if o, err := p.Overhead(); err == nil {
		t.Logf("events dropped %d, missed %d", o.Dropped, o.Missed)
	}
	recs, err := probetest.Decode[bundle.SchedRecord](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.PID != w.PID || r.Level != "c1" || r.Repeat != 2 || r.Source != "ebpf" {
			t.Errorf("record %+v: want pid %d, level c1, repeat 2, source ebpf", r, w.PID)
		}
	}
	busy, idle := probetest.BusyAndIdle(t, w, recs, func(r bundle.SchedRecord) (int, string) { return r.TID, r.Name })
	if busy.WallSec < 1.4 || busy.WallSec > 3 {
		t.Errorf("wall_s = %.3f, want about 1.5", busy.WallSec)
	}
	// A spinning thread is always on a CPU or waiting for one, except for
	// the time the hypervisor stole and interrupts took, which the kernel
	// counts as neither (lost: summed over the host's CPUs, so generous).
	if got := (busy.CPUSec + busy.RunqWaitSec + lost) / busy.WallSec; got < 0.9 {
		t.Errorf("busy thread (cpu_s %.3f + runq_wait_s %.3f + host steal/irq %.3f) / wall_s %.3f = %.3f, want >= 0.9",
			busy.CPUSec, busy.RunqWaitSec, lost, busy.WallSec, got)
	}
	kernelUtil := -1.0
	if kerr0 == nil && kerr1 == nil && k1.RunNs > k0.RunNs {
		kcpu := float64(k1.RunNs-k0.RunNs) / 1e9
		kernelUtil = kcpu / busy.WallSec
		// The probe copies the counter that schedstat prints
		// (se.sum_exec_runtime), so they agree but for the windows: the
		// kernel's here is wider (read before Begin and after End, by as
		// much as this test was kept off a CPU in between), and a running
		// thread's counter lags by up to a tick.
		slack := 0.03*kcpu + 0.02
		wider := max(0, kernelWall-busy.WallSec)
		if d := busy.CPUSec - kcpu; d > slack || d < -slack-wider {
			t.Errorf("busy thread cpu_s %.3f, kernel's schedstat says %.3f over a window %.3f s wider (allowed −%.3f/+%.3f)",
				busy.CPUSec, kcpu, wider, slack+wider, slack)
		}
	}
	t.Logf("busy thread utilization %.3f (kernel's schedstat: %.3f); steal+irq on the host during the period %.3f s", busy.Utilization, kernelUtil, lost)
	switch {
	case busy.Utilization >= 0.9:
	case kernelUtil >= 0 && kernelUtil < 0.92:
		// Other processes took the CPU (2 shared cores): the probe agreed
		// with the kernel above, which is what this test is about. The
		// kernel's window is wider, so it can read a little more: under
		// `go test ./...` (2026-12-02) the probe 0.898, the kernel 0.905.
		t.Logf("machine busy: the spinning thread got only %.0f%% of a core", 100*kernelUtil)
	default:
		t.Errorf("busy thread utilization %.3f (cpu_s %.3f / wall_s %.3f), want >= 0.9", busy.Utilization, busy.CPUSec, busy.WallSec)
	}
	// Off-CPU is the rest of the period: the spinner's is its run-queue
	// wait (and stolen time), not more.
	if off := busy.OffCPUSec; off > busy.RunqWaitSec+lost+0.05 {
		t.Errorf("busy thread offcpu_s %.3f, want about its runq_wait_s %.3f", off, busy.RunqWaitSec)
	}
	if idle.Utilization > 0.05 {
		t.Errorf("sleeping thread utilization %.3f, want < 0.05", idle.Utilization)
	}
	// It sleeps 10 ms at a time: ~150 wake-ups, each a voluntary switch and
	// a run-queue wait.
	if idle.Voluntary < 50 || idle.RunqCount < 50 {
		t.Errorf("sleeping thread: %d voluntary switches, %d run-queue waits; want >= 50 each", idle.Voluntary, idle.RunqCount)
	}
	if idle.RunqP50us <= 0 || idle.RunqP99us < idle.RunqP50us {
		t.Errorf("sleeping thread run-queue p50 %.1f µs, p99 %.1f µs: want 0 < p50 <= p99", idle.RunqP50us, idle.RunqP99us)
	}
	if idle.OffCPUSec < 1.2 {
		t.Errorf("sleeping thread off-CPU %.3f s, want most of the period", idle.OffCPUSec)
	}
}

// TestOverhead measures the CPU time of the BPF programs while the
// workload runs (a busy thread plus ~100 wake-ups/s, and whatever else
// this machine schedules: the programs run on every switch system-wide and
// filter by tgid).
func TestOverhead(t *testing.T) {
	need.Root(t, "to load BPF programs and read their run time")
	probetest.EnableStats(t)
	w := probetest.StartWorkload(t)
	p := startProbe(t, w, &probetest.Sink{})
	o0, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(1500 * time.Millisecond)
	o1, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(t0)
	runs := o1.Runs - o0.Runs
	rt := o1.Runtime - o0.Runtime
	if runs == 0 || rt == 0 {
		t.Fatalf("no runs recorded (%d runs, %v)", runs, rt)
	}
	frac := rt.Seconds() / wall.Seconds()
	t.Logf("BPF programs: %d runs in %v (%.0f/s), %v total, %.0f ns/run, %.3f%% of one CPU; dropped %d, missed %d",
		runs, wall.Round(time.Millisecond), float64(runs)/wall.Seconds(), rt, float64(rt.Nanoseconds())/float64(runs), 100*frac, o1.Dropped, o1.Missed)
	if frac > 0.05 {
		t.Errorf("BPF programs used %.2f%% of a CPU, want < 5%%", 100*frac)
	}
}

// TestSeedsEveryThread checks that threads are accounted from Start even
// if they have not been switched since: the task iterator must have made
// an entry for each, so an End right after Start lists them all.
func TestSeedsEveryThread(t *testing.T) {
	w := probetest.StartWorkload(t)
	sink := &probetest.Sink{}
	p := startProbe(t, w, sink)
	if err := p.End(context.Background(), probe.Period{Level: "seed"}); err != nil {
		t.Fatalf("End: %v", err)
	}
	recs, err := probetest.Decode[bundle.SchedRecord](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[int]bool)
	for _, r := range recs {
		got[r.TID] = true
	}
	threads := proctree.Threads(w.PID)
	for _, tid := range threads {
		if !got[tid] {
			t.Errorf("thread %d (%s) has no record", tid, proctree.Comm(w.PID, tid))
		}
	}
	if len(threads) < 3 {
		t.Errorf("workload has %d threads, want at least 3", len(threads))
	}
}

func TestNotSupported(t *testing.T) {
	if err := New().Start(context.Background(), probe.Target{}, &probetest.Sink{}); !errors.Is(err, probe.ErrNotSupported) {
		t.Errorf("Start without a pid: %v, want ErrNotSupported", err)
	}
	// How errors are classified is tested in probe/internal/bpf (bpf.NotSupported).
}

// hostLostSeconds is the machine's steal, irq and softirq time so far,
// summed over CPUs, from /proc/stat (0 when it cannot be read).
func hostLostSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks float64
	for _, i := range []int{6, 7, 8} {
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return ticks / 100 // USER_HZ
}

// The bins' widths.
const (
	binNs = bins.BinNs
	binUs = bins.BinUs
)

func TestBinner(t *testing.T) {
	const ms = int64(time.Millisecond)
	b := newBinner(1000*ms, 0) // unix = CLOCK_MONOTONIC + 1 s
	mono := func(unixMs float64) uint64 { return uint64(unixMs*1e6) - 1e9 }
	b.Begin(probe.Period{StartUnixNs: 2000 * ms})
	// On a CPU from 5 ms before the pass (cut) to 15 ms in, then waiting
	// 2.5 ms: bin 0 full, bin 1 half on-CPU and a quarter waiting.
	b.Events(interval{Tid: 7, Kind: evOnCPU, Start: mono(1995), End: mono(2015)})
	b.Events(interval{Tid: 7, Kind: evRunq, Start: mono(2015), End: mono(2017.5)})
	// Sub-microsecond intervals add up without drift: 1000 of 0.6 µs.
	for i := range 1000 {
		s := 2020 + float64(i)*0.0006
		b.Events(interval{Tid: 9, Kind: evOnCPU, Start: mono(s), End: mono(s + 0.0006)})
	}
	// End reads the map: thread 8 on a CPU since 25 ms (not yet switched
	// out), and thread 7's interval from 17.5 ms, whose event comes while
	// the map is read: counted once.
	b.Capture(mono(2031))
	b.Events(interval{Tid: 7, Kind: evOnCPU, Start: mono(2017.5), End: mono(2033)})
	b.Events(interval{Tid: 99, Kind: bins.Mark, Start: mono(2034), End: mono(2034)})
	ctx := context.Background()
	if ok, _ := b.WaitMark(ctx, mono(2033.5), 0); !ok {
		t.Errorf("mark at 2034 ms: not read by 2033.5 ms")
	}
	if ok, _ := b.WaitMark(ctx, mono(2035), 0); ok {
		t.Errorf("mark at 2034 ms: read by 2035 ms")
	}
	// A pass of 32 ms: 4 bins, the last one whole (to 40 ms).
	out, dropped, _ := b.Finish(2032*ms, []interval{
		{Tid: 8, Kind: evOnCPU, Start: mono(2025), End: mono(2040)},
		{Tid: 7, Kind: evOnCPU, Start: mono(2017.5), End: mono(2040)},
	})
	want := map[uint32][2][]int{
		7: {{10000, 7500, 10000, 3000}, {0, 2500, 0, 0}},
		8: {{0, 0, 5000, 10000}, {0, 0, 0, 0}},
		9: {{0, 0, 600, 0}, {0, 0, 0, 0}},
	}
	if got := arrays(out, 4); !reflect.DeepEqual(got, want) || dropped != 0 {
		t.Errorf("bins %v, dropped %d;\nwant %v, 0", got, dropped, want)
	}
	// Events read after End belong to the next pass when they end in it:
	// End without Begin starts it where this one ended.
	b.Events(interval{Tid: 8, Kind: evOnCPU, Start: mono(2025), End: mono(2045)})
	b.Events(interval{Tid: 8, Kind: evRunq, Start: mono(2045), End: mono(2046)})
	if s := b.EnsureOpen(); s != 2032*ms {
		t.Errorf("next pass starts at %d, want %d", s, 2032*ms)
	}
	b.Events(interval{Tid: 8, Kind: evOnCPU, Start: mono(2046), End: mono(2050)})
	out, _, _ = b.Finish(2052*ms, nil)
	want = map[uint32][2][]int{
		7: {{1000, 0}, {0, 0}},
		8: {{10000, 7000}, {0, 1000}},
	}
	if got := arrays(out, 2); !reflect.DeepEqual(got, want) {
		t.Errorf("continued pass: %v, want %v", got, want)
	}
	// Begin later: what ended before it is left out.
	b.Events(interval{Tid: 8, Kind: evOnCPU, Start: mono(2051), End: mono(2060)})
	b.Begin(probe.Period{StartUnixNs: 2055 * ms})
	out, _, _ = b.Finish(2065*ms, nil)
	if got, w := arrays(out, 1)[8][0], []int{5000}; !reflect.DeepEqual(got, w) {
		t.Errorf("pass begun at 2055 ms: %v, want %v", got, w)
	}
	// Bounded: threads over bins.MaxBinThreads and time past bins.MaxPassBins are
	// counted, not kept.
	b.Begin(probe.Period{StartUnixNs: 3000 * ms})
	for tid := range uint32(bins.MaxBinThreads + 3) {
		b.Events(interval{Tid: tid + 1, Kind: evOnCPU, Start: mono(3000), End: mono(3001)})
	}
	end := 3000 + float64(bins.MaxPassBins*BinMs)
	b.Events(interval{Tid: 1, Kind: evRunq, Start: mono(end - 1), End: mono(end + 5)})
	out, dropped, _ = b.Finish(int64(end)*ms, nil)
	if len(out) != bins.MaxBinThreads || dropped != 4 {
		t.Errorf("%d threads kept, %d dropped; want %d and 4", len(out), dropped, bins.MaxBinThreads)
	}
	if r := out[1].Arrays(bins.MaxPassBins)[evRunq]; len(r) != bins.MaxPassBins || r[bins.MaxPassBins-1] != 1000 {
		t.Errorf("interval across the last bin: %d bins, last %d µs; want %d and 1000", len(r), r[len(r)-1], bins.MaxPassBins)
	}
	if n, _ := b.Totals(); n != 4 {
		t.Errorf("dropped since Start %d, want 4", n)
	}
}

// arrays returns the on-CPU and run-queue arrays of n bins of each thread.
func arrays(threads map[uint32]*bins.Thread[struct{}], n int) map[uint32][2][]int {
	out := make(map[uint32][2][]int)
	for tid, t := range threads {
		a := t.Arrays(n)
		out[tid] = [2][]int{a[evOnCPU], a[evRunq]}
	}
	return out
}

// TestTimeBins checks sched_bins.jsonl against sched.jsonl over the same
// passes: one begun with Begin (with the capture's period times), one
// continued by End without Begin.
func TestTimeBins(t *testing.T) {
	w := probetest.StartWorkload(t)
	sink := &probetest.Sink{}
	p := startProbe(t, w, sink)
	ctx := context.Background()
	per := probe.Period{Level: "c=4", Repeat: 1, StartUnixNs: time.Now().UnixNano()}
	p.Begin(per)
	time.Sleep(1500 * time.Millisecond)
	per.EndUnixNs = time.Now().UnixNano()
	if err := p.End(ctx, per); err != nil {
		t.Fatalf("End: %v", err)
	}
	cont := probe.Period{Level: "c=4", Repeat: 2}
	time.Sleep(500 * time.Millisecond)
	if err := p.End(ctx, cont); err != nil {
		t.Fatalf("End: %v", err)
	}
	o, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ring buffer drops %d, bins drops %d, missed %d", o.RingDropped, o.BinsDropped, o.Missed)
	recs, err := probetest.Decode[bundle.SchedRecord](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	bins, err := probetest.Decode[bundle.ThreadBins](sink, BinsFile)
	if err != nil {
		t.Fatal(err)
	}
	pass := func(repeat int) (map[int]bundle.SchedRecord, map[int]bundle.ThreadBins) {
		rs, bs := map[int]bundle.SchedRecord{}, map[int]bundle.ThreadBins{}
		for _, r := range recs {
			if r.Repeat == repeat {
				rs[r.TID] = r
			}
		}
		for _, b := range bins {
			if b.Repeat == repeat {
				bs[b.TID] = b
			}
		}
		return rs, bs
	}
	var firstEnd int64
	for repeat := 1; repeat <= 2; repeat++ {
		rs, bs := pass(repeat)
		busy, okb := bs[w.BusyTID]
		idle, oki := bs[w.SleepTID]
		if !okb || !oki {
			t.Fatalf("pass %d: no bins for the busy (%v) or sleeping (%v) thread in %d records", repeat, okb, oki, len(bs))
		}
		for _, b := range bs {
			if b.PID != w.PID || b.Level != "c=4" || b.BinMs != BinMs || b.Warmup || len(b.OnCPUUs) != len(b.RunqUs) {
				t.Errorf("pass %d thread %d: pid %d level %q bin_ms %d warmup %v, %d and %d bins",
					repeat, b.TID, b.PID, b.Level, b.BinMs, b.Warmup, len(b.OnCPUUs), len(b.RunqUs))
			}
			if b.DroppedEvents != 0 {
				t.Errorf("pass %d thread %d: dropped_events %d, want 0", repeat, b.TID, b.DroppedEvents)
			}
			// A thread is on a CPU or waiting for one, not both: at most
			// a bin's 10,000 µs, but for a microsecond of rounding at
			// each end of an interval.
			worst := 0
			for i := range b.OnCPUUs {
				worst = max(worst, b.OnCPUUs[i]+b.RunqUs[i])
			}
			if worst > binUs+2 {
				t.Errorf("pass %d thread %d (%s): a bin has %d µs on-CPU + run-queue, want <= %d", repeat, b.TID, b.Name, worst, binUs+2)
			}
		}
		if busy.Name != probetest.BusyName || idle.Name != probetest.SleepName {
			t.Errorf("names %q, %q; want %q, %q", busy.Name, idle.Name, probetest.BusyName, probetest.SleepName)
		}
		n := len(busy.OnCPUUs)
		if repeat == 1 {
			if busy.StartUnixNs != per.StartUnixNs {
				t.Errorf("start_unix_ns %d, want the period's %d", busy.StartUnixNs, per.StartUnixNs)
			}
			if want := int((per.EndUnixNs - per.StartUnixNs + binNs - 1) / binNs); n != want {
				t.Errorf("%d bins, want ceil(wall / 10 ms) = %d", n, want)
			}
			firstEnd = per.EndUnixNs
		} else if busy.StartUnixNs != firstEnd {
			t.Errorf("End without Begin: start_unix_ns %d, want where the last pass ended, %d", busy.StartUnixNs, firstEnd)
		}
		sum := func(v []int) float64 {
			s := 0
			for _, x := range v {
				s += x
			}
			return float64(s) / 1e6
		}
		onSum, rqSum := sum(busy.OnCPUUs), sum(busy.RunqUs)
		rec := rs[w.BusyTID]
		half, full, worstIdle := 0, 0, 0
		for i := range n {
			if busy.OnCPUUs[i] > binUs/2 {
				half++
			}
			if busy.OnCPUUs[i]+busy.RunqUs[i] >= binUs*9/10 {
				full++
			}
		}
		for _, v := range idle.OnCPUUs {
			worstIdle = max(worstIdle, v)
		}
		sw := rec.Voluntary + rec.Involuntary
		defer t.Logf("pass %d: %d bins; busy thread on-CPU %.4f s in bins vs cpu_s %.4f (diff %+.4f s, %.2f µs per switch of %d), run-queue %.4f vs %.4f, sum diff %+.4f; "+
			"%d/%d bins > 5 ms on-CPU, %d/%d >= 9 ms on-CPU+run-queue; sleeping thread on-CPU %.4f s vs %.4f, at most %d µs a bin",
			repeat, n, onSum, rec.CPUSec, onSum-rec.CPUSec, 1e6*(onSum-rec.CPUSec)/float64(max(sw, 1)), sw, rqSum, rec.RunqWaitSec, onSum+rqSum-rec.CPUSec-rec.RunqWaitSec, half, n, full, n,
			sum(idle.OnCPUUs), rs[w.SleepTID].CPUSec, worstIdle)
		// The bins' on-CPU time is the intervals between the switch
		// tracepoints; cpu_s is the kernel's se.sum_exec_runtime, which
		// leaves out stolen time and whose clock stops and starts at
		// other points of __schedule. Measured on this 2-core VM, 30
		// passes at load 2.5-8 (and 24 before, same figures): the bins
		// read +0.008..+0.069 s more on-CPU time than cpu_s over 1.5 s
		// passes at up to 8,700 switches of the busy thread, 7-11 µs a
		// switch where it switched over 2,000 times (up to 17 µs a
		// switch at 1,200 switches, where the windows weigh more), and
		// as much less run-queue wait; under `go test ./...` (other
		// packages' tests beside it, 2026-12-02) once +0.072 s over a
		// 0.56 s pass at 3,055 switches, 23.5 µs a switch. Allowed: 30 µs
		// a switch + 20 ms above, 20 ms below.
		if d := onSum - rec.CPUSec; d > 0.02+30e-6*float64(sw) || d < -0.02 {
			t.Errorf("pass %d: busy thread on-CPU in bins %.4f s, cpu_s %.4f: diff %+.4f s, allowed -0.02..+%.4f (%d switches)",
				repeat, onSum, rec.CPUSec, d, 0.02+30e-6*float64(sw), sw)
		}
		// Their sum: measured -0.011..+0.019 s (the bins run to the end
		// of the last whole bin, up to 10 ms past the pass; a running
		// thread's kernel counters lag by up to a tick, 4 ms, at each
		// end); under `go test ./...` once +0.049 s (the pass above).
		// Allowed: -0.02..+0.06 s.
		if d := onSum + rqSum - rec.CPUSec - rec.RunqWaitSec; d > 0.06 || d < -0.02 {
			t.Errorf("pass %d: busy thread on-CPU + run-queue in bins %.4f s, cpu_s + runq_wait_s %.4f: diff %+.4f s, allowed -0.02..+0.06",
				repeat, onSum+rqSum, rec.CPUSec+rec.RunqWaitSec, d)
		}
		// A spinning thread is on a CPU or waiting for one in every bin
		// (measured: all bins >= 9 ms in 29 of 30 passes, 150 of 151 in
		// the other; before the BPF program stood in for the switch-ins
		// that the kernel does not trace, 143 of 151 at worst).
		if full < n*9/10 {
			t.Errorf("pass %d: busy thread on-CPU + run-queue >= 9 ms in %d of %d bins, want >= 90%%", repeat, full, n)
		}
		// Most of its bins are more than half on a CPU when it has a
		// core to itself (measured in the 5 passes at utilization >=
		// 0.9: 150-151 of 151 bins, 51-52 of 52). On a busy machine (cpu_s/wall_s
		// 0.23-0.80 under load 6: 5 to 126 of 151 bins) the kernel's
		// utilization says why fewer are, and the checks above still
		// tie the bins to cpu_s.
		if rec.Utilization >= 0.9 && half < n*8/10 {
			t.Errorf("pass %d: busy thread (utilization %.3f) > 5 ms on-CPU in %d of %d bins, want >= 80%%", repeat, rec.Utilization, half, n)
		} else if rec.Utilization < 0.9 {
			t.Logf("pass %d: machine busy, the spinning thread got %.0f%% of a core: > 5 ms on-CPU in %d of %d bins", repeat, 100*rec.Utilization, half, n)
		}
		// The sleeping thread runs a few µs every 10 ms (measured: at
		// most 165 µs in a bin, 0.2-1.7 ms in a pass where cpu_s said
		// 0.5-6.5 ms: its runs are as short as the boundary shift). In
		// CI on 2026-12-05, beside other packages' tests, one bin held
		// 2022 µs in a pass where cpu_s said 7.3 ms: the kernel too saw
		// the thread run longer. A bin is allowed 4 ms, under the 5 ms
		// that the busy thread passes in most bins; the sum, tied to
		// cpu_s, is what catches time given to the wrong thread.
		if worstIdle > 4000 || sum(idle.OnCPUUs) > rs[w.SleepTID].CPUSec+0.005 {
			t.Errorf("pass %d: sleeping thread on-CPU %.4f s in bins (cpu_s %.4f), at most %d µs a bin; want near 0 (<= 4000 µs a bin)",
				repeat, sum(idle.OnCPUUs), rs[w.SleepTID].CPUSec, worstIdle)
		}
	}
	if o.RingDropped+o.BinsDropped != 0 {
		t.Errorf("intervals lost: %d to the ring buffer, %d to the bounds (Losses: %q); want none", o.RingDropped, o.BinsDropped, p.Losses())
	}
}
