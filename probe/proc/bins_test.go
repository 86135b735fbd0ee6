package proc

import (
	"bufio"
	"context"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/bins"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

const ms = int64(time.Millisecond)

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		name         string
		s, e, amount int64
		want         []share
	}{
		{"inside one bin", 2 * ms, 8 * ms, 6000, []share{{0, 6000}}},
		{"across a boundary, half each side", 15 * ms, 25 * ms, 10000, []share{{0, 5000}, {1, 5000}}},
		{"over three bins, by overlap", 10 * ms, 50 * ms, 8000, []share{{0, 2000}, {1, 4000}, {2, 2000}}},
		// 1000 µs over 30 ms: A(20 ms) = floor(1000·20/30) = 666.
		{"rounded to whole µs, sum kept", 0, 30 * ms, 1000, []share{{0, 666}, {1, 334}}},
		{"before the pass start", -10 * ms, 10 * ms, 4000, []share{{-1, 2000}, {0, 2000}}},
		{"ends on a boundary", 10 * ms, 40 * ms, 3000, []share{{0, 1000}, {1, 2000}}},
		{"empty interval: all at its end", 40 * ms, 40 * ms, 5, []share{{1, 5}}},
		{"nothing to spread", 0, 20 * ms, 0, nil},
		// 3 µs over 3 bins of 20 ms, 1 µs each.
		{"tiny amount", 0, 60 * ms, 3, []share{{0, 1}, {1, 1}, {2, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spread(nil, tc.s, tc.e, 20*ms, tc.amount); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("spread(%d, %d, %d) = %v, want %v", tc.s, tc.e, tc.amount, got, tc.want)
			}
		})
	}
	// Any interval: the shares add up to the amount, each within 1 µs of
	// its proportional part, in consecutive bins.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		s := r.Int64N(200*ms) - 50*ms
		e := s + r.Int64N(100*ms) + 1
		amount := r.Int64N(int64(e-s)/1000 + 2)
		got := spread(nil, s, e, 20*ms, amount)
		var sum int64
		for i, sh := range got {
			sum += sh.us
			lo, hi := max(s, sh.bin*20*ms), min(e, (sh.bin+1)*20*ms)
			if exact := float64(amount) * float64(hi-lo) / float64(e-s); float64(sh.us) < exact-1 || float64(sh.us) > exact+1 {
				t.Fatalf("spread(%d, %d, %d): bin %d got %d µs, want %.1f", s, e, amount, sh.bin, sh.us, exact)
			}
			if i > 0 && sh.bin <= got[i-1].bin {
				t.Fatalf("spread(%d, %d, %d) = %v: bins out of order", s, e, amount, got)
			}
		}
		if sum != amount {
			t.Fatalf("spread(%d, %d, %d) = %v: sum %d", s, e, amount, got, sum)
		}
	}
	// Large amounts over long spans do not overflow.
	if got := spread(nil, 0, 3600_000*ms, 20*ms, 3600_000_000); len(got) != 180_000 || got[0].us != 20_000 || got[len(got)-1].us != 20_000 {
		t.Errorf("an hour at 100%%: %d bins, first %v", len(got), got[:1])
	}
}

func TestCreditSpan(t *testing.T) {
	for _, tc := range []struct {
		t0, t1, on, rq int64
		s, e           int64
	}{
		{0, 20 * ms, 5000, 3000, 0, 20 * ms},                 // fits: the interval between reads
		{0, 20 * ms, 20000, 0, 0, 20 * ms},                   // exactly
		{100 * ms, 120 * ms, 4000, 26000, 90 * ms, 120 * ms}, // a 26 ms wait counted when it ended: 30 ms back
	} {
		if s, e := creditSpan(tc.t0, tc.t1, tc.on, tc.rq); s != tc.s || e != tc.e {
			t.Errorf("creditSpan(%d, %d, %d, %d) = [%d, %d), want [%d, %d)", tc.t0, tc.t1, tc.on, tc.rq, s, e, tc.s, tc.e)
		}
	}
}

func TestParseRunWait(t *testing.T) {
	if run, wait, ok := parseRunWait([]byte("2862299 423513 2\n")); !ok || run != 2862299 || wait != 423513 {
		t.Errorf("parseRunWait = %d, %d, %v", run, wait, ok)
	}
	for _, bad := range []string{"", "12", "12 ", "12 x 3\n", "-1 2 3\n", "1\t2 3\n"} {
		if _, _, ok := parseRunWait([]byte(bad)); ok {
			t.Errorf("parseRunWait(%q): want not ok", bad)
		}
	}
}

// TestBinnerBounds checks the binner's arithmetic and bounds on a pass fed
// by hand: time before the pass is left out, a thread's arrays are its
// bins, threads over MaxBinThreads and bins past the pass's limit are
// counted as dropped.
func TestBinnerBounds(t *testing.T) {
	b := newBinner(20)
	b.maxBins = 5 // 100 ms
	const start = 1_000_000 * ms
	b.begin(start)
	th := &binThread{pid: 1, tid: 2, name: "x"}
	b.mu.Lock()
	// 10 ms before the start to 30 ms: 40 ms, 20 ms on and 20 ms queued.
	b.creditLocked(th, start-10*ms, start+30*ms, 20000, 20000)
	// Entirely before the start: nothing.
	b.creditLocked(th, start-30*ms, start-10*ms, 5000, 0)
	// Across the limit (bins 4 and 5): half kept, one sample dropped.
	b.creditLocked(th, start+90*ms, start+110*ms, 4000, 0)
	for tid := range MaxBinThreads + 1 { // with thread 2: two too many
		b.creditLocked(&binThread{pid: 7, tid: 100 + tid}, start, start+20*ms, 1000, 0)
	}
	b.mu.Unlock()
	p := b.finish(bins.Pass{Start: start, End: start + 100*ms, N: 5})
	a := p.threads[threadKey{1, 2}].Arrays(5)
	on, rq := a[0], a[1]
	if want := []int{10000, 5000, 0, 0, 2000}; !reflect.DeepEqual(on, want) {
		t.Errorf("on-CPU %v, want %v", on, want)
	}
	if want := []int{10000, 5000, 0, 0, 0}; !reflect.DeepEqual(rq, want) {
		t.Errorf("run queue %v, want %v", rq, want)
	}
	if len(p.threads) != MaxBinThreads || p.dropped != 1+2 || b.losses() != 3 {
		t.Errorf("%d threads, %d dropped (%d since start); want %d, 3", len(p.threads), p.dropped, b.losses(), MaxBinThreads)
	}
	if b.pass == nil || b.pass.start != start+100*ms {
		t.Errorf("after finish: pass %+v, want one open at the end", b.pass)
	}
}

// spinThenSleep names its OS thread name, spins for spin, sleeps for
// sleep, and returns its tid and the unix ns when it started and stopped
// spinning and woke, through the channel; then it blocks until release
// closes.
func spinThenSleep(name string, spin, sleep time.Duration, out chan<- [4]int64, release <-chan struct{}) {
	runtime.LockOSThread()
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
	a := time.Now()
	x := uint64(1)
	for time.Since(a) < spin {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	c := time.Now()
	runtime.KeepAlive(x)
	ts := unix.NsecToTimespec(int64(sleep))
	_ = unix.Nanosleep(&ts, nil) // the thread itself sleeps, not just the goroutine
	out <- [4]int64{int64(unix.Gettid()), a.UnixNano(), c.UnixNano(), time.Now().UnixNano()}
	<-release
}

// TestBinsSpinThenSleep runs the probe on this process while one of its
// threads spins ~300 ms and then sleeps ~300 ms: the bins inside the spin
// must be about full, those inside the sleep about empty, and the thread's
// time must sit where it spun (a shift of one bin fails).
func TestBinsSpinThenSleep(t *testing.T) {
	sink := &probetest.Sink{}
	p := New(Config{})
	probetest.Start(t, p, probe.Target{PID: os.Getpid()}, sink, "/proc not usable here")
	if p.bins == nil {
		t.Skipf("no time bins here: %s", p.Detail())
	}
	per := probe.Period{Level: "c1", Repeat: 2, StartUnixNs: time.Now().UnixNano()}
	p.Begin(per)
	time.Sleep(100 * time.Millisecond)
	got, release := make(chan [4]int64, 1), make(chan struct{})
	defer close(release)
	go spinThenSleep("asrp-spin", 300*time.Millisecond, 300*time.Millisecond, got, release)
	w := <-got
	tid, spinFrom, spinTo, sleepTo := int(w[0]), w[1], w[2], w[3]
	time.Sleep(100 * time.Millisecond)
	per.EndUnixNs = time.Now().UnixNano()
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	if totals, err := probetest.Decode[bundle.SchedRecord](sink, File); err != nil || len(totals) == 0 {
		t.Fatalf("%s: %d records, %v; want the totals as before", File, len(totals), err)
	}
	recs, err := probetest.Decode[bundle.ThreadBins](sink, BinsFile)
	if err != nil {
		t.Fatal(err)
	}
	var r *bundle.ThreadBins
	for i := range recs {
		if recs[i].TID == tid {
			r = &recs[i]
		}
		if sum(recs[i].OnCPUUs)+sum(recs[i].RunqUs) == 0 {
			t.Errorf("thread %d (%s) has a line but no time", recs[i].TID, recs[i].Name)
		}
	}
	if r == nil {
		t.Fatalf("no bins for the spinning thread %d among %d lines", tid, len(recs))
	}
	wantN := int((per.EndUnixNs - per.StartUnixNs + 20*ms - 1) / (20 * ms))
	if r.PID != os.Getpid() || r.Name != "asrp-spin" || r.Level != "c1" || r.Repeat != 2 || r.Source != "proc" ||
		r.StartUnixNs != per.StartUnixNs || r.BinMs != DefaultBinMs || len(r.OnCPUUs) != wantN || len(r.RunqUs) != wantN {
		t.Errorf("line of level %s: want pid %d, name asrp-spin, c1 repeat 2, source proc, start %d, %d bins of 20 ms",
			r.Level, os.Getpid(), per.StartUnixNs, wantN)
	}
	if r.DroppedEvents != 0 || p.Losses() != "" {
		t.Errorf("dropped %d, losses %q; want none", r.DroppedEvents, p.Losses())
	}
	const binUs = 20000
	margin := 40 * ms // one sampling interval plus the kernel's tick
	var spinOn, spinAll, spinN, sleepOn, sleepN float64
	var mass, massT, inSpan float64
	for i := range r.OnCPUUs {
		lo := r.StartUnixNs + int64(i)*20*ms
		hi := lo + 20*ms
		on, all := float64(r.OnCPUUs[i]), float64(r.OnCPUUs[i]+r.RunqUs[i])
		mass += all
		if lo >= spinFrom-margin && hi <= spinTo+margin {
			inSpan += all
		}
		massT += all * float64(lo+hi) / 2
		switch {
		case lo >= spinFrom+margin && hi <= spinTo-margin:
			spinOn += on
			spinAll += all
			spinN++
		case lo >= spinTo+margin && hi <= sleepTo-margin:
			sleepOn += on
			sleepN++
			if on > 0.05*binUs {
				t.Errorf("bin %d, inside the sleep: %v µs on a CPU", i, on)
			}
		}
	}
	t.Logf("on-CPU µs %v", r.OnCPUUs)
	t.Logf("run-queue µs %v", r.RunqUs)
	if spinN < 8 || sleepN < 8 {
		t.Fatalf("%v bins inside the spin, %v inside the sleep; want at least 8 each", spinN, sleepN)
	}
	if spinAll/spinN < 0.85*binUs {
		t.Errorf("inside the spin: %.0f µs a bin on a CPU or waiting for one, want about %d", spinAll/spinN, binUs)
	}
	if sleepOn/sleepN > 0.02*binUs || sleepOn/sleepN > 0.1*spinOn/spinN {
		t.Errorf("inside the sleep: %.0f µs on a CPU a bin (%.0f inside the spin), want about 0", sleepOn/sleepN, spinOn/spinN)
	}
	// The thread's time sits where it spun: the centre of its on-CPU and
	// run-queue time is the middle of the spin, its total is the spin, and
	// hardly any lies outside the spin and its margins.
	tol := 10 * time.Millisecond
	if spinOn/spinN < 0.9*binUs {
		// On a shared machine the spinning thread may not get a whole core.
		// It then waits on the run queue, which the checks count, also just
		// before and after its spin: there the centre may move a little.
		t.Logf("machine busy: the spinning thread got %.0f%% of a core", 100*spinOn/spinN/binUs)
		tol = 25 * time.Millisecond
	}
	d := time.Duration(massT/mass - float64(spinFrom+spinTo)/2)
	t.Logf("centre of its time %v from the middle of its spin; %.0f µs binned (%.0f outside the spin), spun %v",
		d, mass, mass-inSpan, time.Duration(spinTo-spinFrom))
	if d < -tol || d > tol {
		t.Errorf("the thread's time is centred %v from the middle of its spin, want within %v", d, tol)
	}
	if spin := float64(spinTo-spinFrom) / 1000; mass < 0.85*spin || mass > 1.1*spin+float64(binUs) {
		t.Errorf("the thread's binned time %.0f µs, want about its spin, %.0f µs", mass, spin)
	}
	if mass-inSpan > 0.1*mass {
		t.Errorf("%.0f of the thread's %.0f µs outside its spin (with %v margins), want < 10%%", mass-inSpan, mass, time.Duration(margin))
	}
}

// TestBinsNewProcess runs the probe on this process while it starts a
// child that spins ~400 ms then sleeps: the child is found by a tree
// refresh, hundreds of ms late, yet its bins hold all its on-CPU time
// (binned from its start), as its own schedstat says after the pass.
func TestBinsNewProcess(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 for the child")
	}
	sink := &probetest.Sink{}
	p := New(Config{})
	probetest.Start(t, p, probe.Target{PID: os.Getpid()}, sink, "/proc not usable here")
	if p.bins == nil {
		t.Skipf("no time bins here: %s", p.Detail())
	}
	per := probe.Period{Level: "c1", StartUnixNs: time.Now().UnixNano()}
	p.Begin(per)
	time.Sleep(50 * time.Millisecond)
	born := time.Now().UnixNano()
	child := startChild(t, py, `import sys, time
t = time.time()
while time.time() - t < 0.4:
    pass
print("spun", flush=True)
sys.stdin.read()`)
	time.Sleep(1500 * time.Millisecond) // the child is found within a tree refresh plus watch.TreeMaxAge
	per.EndUnixNs = time.Now().UnixNano()
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	ss, err := proctree.ReadSchedstat(child, child)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := probetest.Decode[bundle.ThreadBins](sink, BinsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.TID != child {
			continue
		}
		t.Logf("child %d (%s): on-CPU µs %v", r.TID, r.Name, r.OnCPUUs)
		on, want := float64(sum(r.OnCPUUs)), float64(ss.RunNs)/1000
		if on < 0.97*want-1000 || on > want+1000 {
			t.Errorf("child's binned on-CPU time %.0f µs, its schedstat %.0f µs: want them equal", on, want)
		}
		first := 0
		for first < len(r.OnCPUUs) && r.OnCPUUs[first] == 0 {
			first++
		}
		// The bin that holds the child's start begins up to a bin
		// before it, and /proc gives that start in clock ticks (its
		// 10 ms truncated: -26 ms was seen on a loaded host).
		tick := int64(1e9 / proctree.UserHZ)
		if at := r.StartUnixNs + int64(first)*20*ms; at < born-20*ms-tick || at > born+100*ms {
			t.Errorf("child's first on-CPU bin starts %v after it was started, want from -%v to 100 ms",
				time.Duration(at-born), time.Duration(20*ms+tick))
		}
		return
	}
	t.Fatalf("no bins for the child %d among %d lines", child, len(recs))
}

// startChild runs python3 with script, waits for its first line, and
// returns its pid; it is killed when the test ends.
func startChild(tb testing.TB, py, script string) int {
	tb.Helper()
	cmd := exec.Command(py, "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting python3: %v", err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("python3 child: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// BenchmarkSweep50Threads measures one read of every thread of a child
// with 50 sleeping threads (the bins' fast loop, once a bin): CPU ns a
// sweep, and what that makes at DefaultBinMs.
func BenchmarkSweep50Threads(b *testing.B) {
	pid := start50Threads(b)
	bn := newBinner(DefaultBinMs)
	bn.begin(bn.now())
	threads := make(map[int]sample)
	for _, tid := range proctree.Threads(pid) {
		threads[tid] = sample{pid: pid, name: "t"}
	}
	bn.sync(threads, time.Now())
	defer bn.close(context.Background())
	cpu0 := cpuTime()
	for b.Loop() {
		bn.mu.Lock()
		bn.sweepLocked()
		bn.mu.Unlock()
	}
	ns := float64(cpuTime()-cpu0) / float64(b.N)
	b.ReportMetric(ns, "cpu-ns/op")
	b.ReportMetric(float64(len(bn.threads)), "threads")
	b.ReportMetric(100*ns*1000/DefaultBinMs/1e9, "%core@50Hz")
}

// BenchmarkProbe50Threads measures the whole probe's CPU time (both
// samplers, its goroutines' wake-ups included) on a child with 50 sleeping
// threads, as the share of one core over an op of one second of a pass,
// with the time bins at DefaultBinMs and without them (their sampler
// stopped after Start): the difference is what the bins cost, of which
// bins-loop-%core is the fast loop's own thread (its sweeps and wake-ups;
// the rest is handing threads over at each refresh and the cache misses
// the sweeps cause elsewhere). Run it with
//
//	go test -run '^$' -bench Probe50Threads -benchtime 10x ./probe/proc/
func BenchmarkProbe50Threads(b *testing.B) {
	for _, bins := range []bool{true, false} {
		b.Run(fmt.Sprintf("bins=%v", bins), func(b *testing.B) {
			pid := start50Threads(b)
			p := New(Config{})
			probetest.Start(b, p, probe.Target{PID: pid}, &probetest.Sink{}, "/proc not usable here")
			if !bins {
				p.mu.Lock()
				if p.bins != nil {
					_ = p.bins.close(context.Background())
					p.bins = nil
				}
				p.mu.Unlock()
			}
			p.Begin(probe.Period{Level: "bench"})
			time.Sleep(100 * time.Millisecond) // the fast loop runs
			loop0 := loopCPU(b, p)
			cpu0, t0 := cpuTime(), time.Now()
			for b.Loop() {
				time.Sleep(time.Second)
			}
			cpu, wall := cpuTime()-cpu0, time.Since(t0)
			b.ReportMetric(100*float64(cpu)/float64(wall), "%core")
			if bins {
				b.ReportMetric(100*float64(loopCPU(b, p)-loop0)/float64(wall), "bins-loop-%core")
			}
			if err := p.End(context.Background(), probe.Period{Level: "bench"}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// loopCPU returns the CPU ns of the bins' fast loop's thread so far (0
// without bins).
func loopCPU(b *testing.B, p *Probe) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bins == nil {
		return 0
	}
	ss, err := proctree.ReadSchedstat(os.Getpid(), int(p.bins.loopTID.Load()))
	if err != nil {
		b.Fatalf("the fast loop's thread: %v", err)
	}
	return int64(ss.RunNs)
}

// start50Threads starts a python3 child with 50 threads that sleep, and
// returns its pid once they run.
func start50Threads(b *testing.B) int {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("no python3 for the child")
	}
	pid := startChild(b, py, `import sys, threading, time
for _ in range(50):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()`)
	if n := len(proctree.Threads(pid)); n < 51 {
		b.Fatalf("child has %d threads, want 51", n)
	}
	return pid
}
