package sched

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestMain(m *testing.M) {
	probetest.RunWorkloadIfChild()
	os.Exit(m.Run())
}

func TestAccumulate(t *testing.T) {
	// Seen by the iterator of this read (iterAt 1000): alive.
	running := schedTstat{KernCpuNs: 600, KernRunqNs: 50, RunqNs: 40, Kflags: kRunq, SeenNs: 1000, StartNs: 7, Tgid: 7}
	if c := accumulate(&running, 1500, 1000); c.oncpu != 600 || c.rqWait != 50 || c.gone != 0 || c.start != 7 || c.tgid != 7 {
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
	if c := accumulate(&exited, 1500, 1000); c.gone != 850 || c.oncpu != 300 || c.rqWait != 0 {
		t.Errorf("exited thread: %+v, want gone at 850 with 300 on-CPU and no wait in progress", c)
	}
	copy(exited.Comm[:], []int8{'a', 'b', 0, 'x'})
	if c := accumulate(&exited, 0, 0); c.comm != "ab" {
		t.Errorf("comm = %q, want ab", c.comm)
	}
}

func TestDiff(t *testing.T) {
	b := counters{oncpu: 1e9, vol: 5, rqCount: 1}
	a := counters{oncpu: 2.5e9, vol: 8, invol: 2, rqCount: 11, rqWait: 40e3}
	a.hist[3] = 10 // 10 waits in [4,8) µs since b
	r := diff(a, b, 10e9, 12e9)
	want := Record{CPUSec: 1.5, WallSec: 2, Utilization: 0.75, OffCPUSec: 0.5, RunqP50us: 6, RunqP99us: 7.96,
		RunqCount: 10, RunqWaitSec: 40e-6, RunqHist: []uint64{0, 0, 0, 10}, Voluntary: 3, Involuntary: 2, Source: "ebpf"}
	if r.RunqP99us < 7.95 || r.RunqP99us > 7.97 {
		t.Errorf("p99 = %g, want 7.96", r.RunqP99us)
	}
	r.RunqP99us = want.RunqP99us
	if !reflect.DeepEqual(r, want) {
		t.Errorf("diff = %+v\nwant   %+v", r, want)
	}
	// Born half a second into the period, exited a second later, 0.25 s on
	// a CPU: off-CPU for 0.75 s of the 1 s it lived.
	short := counters{oncpu: 0.25e9, start: 10.5e9, gone: 11.5e9}
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
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs")
	}
	p := New(Config{})
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
	recs, err := probetest.Decode[Record](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.PID != w.PID || r.Level != "c1" || r.Repeat != 2 || r.Source != "ebpf" {
			t.Errorf("record %+v: want pid %d, level c1, repeat 2, source ebpf", r, w.PID)
		}
	}
	busy, idle := probetest.BusyAndIdle(t, w, recs, func(r Record) (int, string) { return r.TID, r.Name })
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
	case kernelUtil >= 0 && kernelUtil < 0.9:
		// Other processes took the CPU (2 shared cores): the probe agreed
		// with the kernel above, which is what this test is about.
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
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Skipf("cannot enable BPF run-time statistics: %v", err)
	}
	defer stats.Close()
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
	recs, err := probetest.Decode[Record](sink, File)
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
	if err := New(Config{}).Start(context.Background(), probe.Target{}, &probetest.Sink{}); !errors.Is(err, probe.ErrNotSupported) {
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
