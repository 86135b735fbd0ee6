package proc

import (
	"context"
	"errors"
	"math"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestMain(m *testing.M) {
	probetest.RunWorkloadIfChild()
	os.Exit(m.Run())
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\tasrp-busy\nState:\tR (running)\nTgid:\t42\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t1234\n"
	got, err := ParseStatus(status)
	if err != nil || got != (Switches{Voluntary: 7, Involuntary: 1234}) {
		t.Errorf("ParseStatus = %+v, %v; want 7 and 1234", got, err)
	}
	for _, bad := range []string{"Name:\tx\n", "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"} {
		if _, err := ParseStatus(bad); err == nil {
			t.Errorf("ParseStatus(%q): want error", bad)
		}
	}
}

func TestNoTarget(t *testing.T) {
	err := New(Config{}).Start(context.Background(), probe.Target{}, &probetest.Sink{})
	if !errors.Is(err, probe.ErrNotSupported) {
		t.Errorf("Start without a pid: %v, want ErrNotSupported", err)
	}
}

func TestBusyAndIdleThreads(t *testing.T) {
	w := probetest.StartWorkload(t)
	sink := &probetest.Sink{}
	p := New(Config{Hz: 20})
	probetest.Start(t, p, probe.Target{PID: w.PID}, sink, "/proc not usable here")
	per := probe.Period{Level: "c4", Repeat: 1, Warmup: true}
	p.Begin(per)
	time.Sleep(1500 * time.Millisecond)
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	recs, err := probetest.Decode[bundle.SchedRecord](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.PID != w.PID || r.Level != "c4" || r.Repeat != 1 || !r.Warmup || r.Source != "proc" {
			t.Errorf("record %+v: want pid %d, level c4, repeat 1, warmup, source proc", r, w.PID)
		}
	}
	busy, idle := probetest.BusyAndIdle(t, w, recs, func(r bundle.SchedRecord) (int, string) { return r.TID, r.Name })
	if busy.WallSec < 1.4 || busy.WallSec > 3 {
		t.Errorf("wall_s = %.3f, want about 1.5", busy.WallSec)
	}
	if busy.Utilization < 0.9 {
		// On a shared machine the spinning thread may not get a whole
		// core. What must hold
		// anyway: the time goes to the spinning thread, not the sleeper.
		if busy.CPUSec < 0.1 || busy.CPUSec < 10*idle.CPUSec || busy.Voluntary != 0 {
			t.Errorf("busy thread utilization %.3f (cpu_s %.3f, %d voluntary switches), sleeper cpu_s %.3f",
				busy.Utilization, busy.CPUSec, busy.Voluntary, idle.CPUSec)
		}
		t.Logf("machine busy: the spinning thread got %.0f%% of a core", 100*busy.Utilization)
	}
	if idle.Utilization > 0.05 {
		t.Errorf("sleeping thread utilization %.3f, want < 0.05", idle.Utilization)
	}
	if idle.Voluntary < 50 {
		t.Errorf("sleeping thread: %d voluntary switches, want >= 50 (it wakes every 10 ms)", idle.Voluntary)
	}
	// the per-core record: every core once, and the target's CPU time put
	// on the cores adds up to its threads' (the same samples, the same
	// base)
	cpus, err := probetest.Decode[bundle.CPURecord](sink, CPUsFile)
	if err != nil {
		t.Fatal(err)
	}
	var threads, onCores float64
	for _, r := range recs {
		threads += r.CPUSec
	}
	ncores := 0
	for _, r := range cpus {
		if r.Level != "c4" || r.Repeat != 1 || !r.Warmup {
			t.Errorf("cpus record %+v: want level c4 repeat 1 warmup", r)
		}
		switch r.Kind {
		case bundle.CPUKindCore:
			ncores++
			onCores += r.TargetS
			if r.BusyS+r.IdleS+r.StealS < 0.5*r.WallS || r.BusyS+r.IdleS+r.StealS > 1.5*r.WallS {
				t.Errorf("core %d: busy %.2f + idle %.2f + steal %.2f s over a wall of %.2f s", r.CPU, r.BusyS, r.IdleS, r.StealS, r.WallS)
			}
		case bundle.CPUKindProcess:
			if r.PID == w.PID || r.PID == os.Getpid() || r.CPUS <= 0 {
				t.Errorf("other process %+v: the target, asrprof itself, or no CPU", *r.CPUProcess)
			}
		}
	}
	if ncores != runtime.NumCPU() {
		t.Errorf("%d core records, want %d", ncores, runtime.NumCPU())
	}
	if math.Abs(onCores-threads) > 0.01+0.02*threads {
		t.Errorf("the target's CPU on the cores %.3f s, its threads' %.3f s", onCores, threads)
	}
}

func TestParseProcStat(t *testing.T) {
	got, err := ParseProcStat("cpu  2 0 2 10 0 0 0 0 0 0\ncpu0 1 0 1 5 1 0 1 3 0 0\ncpu1 1 0 1 5 0 0 0 0\nintr 1 2\n")
	if err != nil || got[0] != (coreTicks{busy: 3, idle: 6, steal: 3}) || got[1] != (coreTicks{busy: 2, idle: 5}) || len(got) != 2 {
		t.Errorf("ParseProcStat = %+v, %v", got, err)
	}
	if _, err := ParseProcStat("intr 1\n"); err == nil {
		t.Error("ParseProcStat without a core: want an error")
	}
}

// cpuTime is this process's user+system CPU time in ns.
func cpuTime() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkSample measures one sample of the workload's threads (about a
// dozen: the two named ones plus the Go runtime's).
func BenchmarkSample(b *testing.B) {
	w := probetest.StartWorkload(b)
	p := New(Config{})
	p.target = probe.Target{PID: w.PID}
	p.last = make(map[int]sample)
	p.useSchedstat = true
	p.buf = make([]byte, 16<<10)
	var n int
	cpu0 := cpuTime()
	for b.Loop() {
		n = len(p.sampleLocked(false))
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(n), "threads")
}
