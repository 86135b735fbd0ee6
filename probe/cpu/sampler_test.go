package cpu

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

const (
	hotEnv    = "ASRPROF_CPU_HOT"
	hotThread = "asrp-hot"
	sysThread = "asrp-sys"
)

// hotFunc is the name the profile must show for hotSpin.
var hotFunc = runtime.FuncForPC(funcPC(hotSpin)).Name()

func funcPC(f func(uint64) uint64) uintptr {
	return **(**uintptr)(unsafe.Pointer(&f))
}

// hotSpin is the known hot function: a loop with no calls.
//
//go:noinline
func hotSpin(x uint64) uint64 {
	for i := 0; i < 1<<62; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// runHotIfChild runs the workload of TestSampler and exits when this
// process was started as that child: one thread named asrp-hot spinning in
// hotSpin, one named asrp-sys reading /dev/zero (time in the kernel).
func runHotIfChild() {
	if os.Getenv(hotEnv) != "1" {
		return
	}
	tids := make(map[string]chan int)
	thread := func(name string, f func()) {
		tid := make(chan int, 1)
		tids[name] = tid
		go func() {
			runtime.LockOSThread()
			b := append([]byte(name), 0)
			if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0); err != nil {
				fmt.Fprintln(os.Stderr, "prctl:", err)
				os.Exit(1)
			}
			tid <- unix.Gettid()
			f()
		}()
	}
	thread(hotThread, func() { hotSpin(1) })
	thread(sysThread, func() {
		fd, err := unix.Open("/dev/zero", unix.O_RDONLY, 0)
		if err != nil {
			os.Exit(1)
		}
		buf := make([]byte, 1<<20)
		for {
			_, _ = unix.Read(fd, buf)
		}
	})
	fmt.Printf("hot=%d sys=%d\n", <-tids[hotThread], <-tids[sysThread])
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
	os.Exit(0)
}

// startHot starts the child of runHotIfChild; it is killed when the test
// ends.
func startHot(t *testing.T) (pid, hotTID int) {
	t.Helper()
	pid, s := probetest.StartChild(t, hotEnv+"=1", "GOMAXPROCS=4")
	var sysTID int
	if _, err := fmt.Sscanf(s, "hot=%d sys=%d", &hotTID, &sysTID); err != nil {
		t.Fatalf("child said %q: %v", s, err)
	}
	return pid, hotTID
}

// startProbe starts a cpu probe on pid, skipping when this machine does
// not allow eBPF or perf events.
func startProbe(t *testing.T, pid int, sink probe.Sink) *Probe {
	t.Helper()
	need.Root(t, "to load BPF programs and open perf events")
	p := New(Config{Engine: EngineFP})
	probetest.Start(t, p, probe.Target{PID: pid}, sink, "eBPF sampling not permitted here")
	return p
}

func TestSampler(t *testing.T) {
	need.Root(t, "to load BPF programs and open perf events")
	pid, hotTID := startHot(t)
	sink := &probetest.Sink{Dir: t.TempDir()}
	p := startProbe(t, pid, sink)

	// A warm-up period, then the one checked: samples of the first must
	// not leak into the second.
	warm := probe.Period{Level: "c8", Warmup: true}
	per := probe.Period{Level: "c8", Repeat: 1}
	p.Begin(warm)
	time.Sleep(500 * time.Millisecond)
	if err := p.End(context.Background(), warm); err != nil {
		t.Fatalf("End warm-up: %v", err)
	}
	// The kernel's account of the hot thread's CPU time over the same
	// period says how many samples to expect on a shared machine.
	k0, kerr0 := proctree.ReadSchedstat(pid, hotTID)
	p.Begin(per)
	const period = 2 * time.Second
	time.Sleep(period)
	t0 := time.Now()
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	k1, kerr1 := proctree.ReadSchedstat(pid, hotTID)
	if kerr0 != nil || kerr1 != nil {
		t.Fatalf("reading the hot thread's schedstat: %v, %v", kerr0, kerr1)
	}
	want := float64(k1.RunNs-k0.RunNs) / 1e9 * DefaultHz
	t.Logf("End (collect, symbolize, write) took %v", time.Since(t0).Round(time.Millisecond))

	for _, name := range []string{"c8-warmup.pb.gz", "c8-1.pb.gz"} {
		if _, err := os.Stat(filepath.Join(sink.Dir, Dir, name)); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
	path := filepath.Join(sink.Dir, Dir, "c8-1.pb.gz")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Fatalf("invalid profile: %v", err)
	}

	// Flat samples per function, per thread.
	flat := map[string]map[string]int64{}
	var total, kernelNamed int64
	for _, s := range prof.Sample {
		for _, k := range []string{"pid", "tid", "thread", "level"} {
			if len(s.Label[k]) != 1 {
				t.Fatalf("sample without label %s: %v", k, s.Label)
			}
		}
		if s.Label["pid"][0] != strconv.Itoa(pid) || s.Label["level"][0] != "c8" {
			t.Errorf("sample labels %v, want pid %d and level c8", s.Label, pid)
		}
		th := s.Label["thread"][0]
		if flat[th] == nil {
			flat[th] = map[string]int64{}
		}
		total += s.Value[0]
		if len(s.Location) == 0 {
			continue
		}
		leaf := s.Location[0]
		flat[th][leaf.Line[0].Function.Name] += s.Value[0]
		if th == sysThread && leaf.Mapping.File == KernelFile && !strings.HasPrefix(leaf.Line[0].Function.Name, "[") {
			kernelNamed += s.Value[0]
		}
		if s.Value[1] != s.Value[0]*prof.Period {
			t.Errorf("cpu value %d, want %d samples × %d ns", s.Value[1], s.Value[0], prof.Period)
		}
	}
	hot := flat[hotThread]
	var hotTotal int64
	for _, n := range hot {
		hotTotal += n
	}
	t.Logf("%d samples in %v; hot thread %d (its CPU time says %.0f), of which in %s: %d; sys thread's leaves in the kernel, named: %d",
		total, period, hotTotal, want, hotFunc, hot[hotFunc], kernelNamed)
	t.Logf("hot thread's top leaves: %v", top(hot, 3))
	t.Logf("sys thread's top leaves: %v", top(flat[sysThread], 3))
	// 2 s at 99 Hz is ~198 samples for a thread that has a core; on two
	// shared cores it gets what the kernel gave it. A thread that had its
	// core (≥ 80 % of the period) is sampled within 30 % of its CPU time. A
	// thread that shared it (the machine busy with other tests) is sampled
	// less evenly: the fixed 99 Hz timer beats against the scheduler's
	// switches: runs of this test beside three busy loops gave 0.69 to
	// 1.20× its CPU time, one in a busy `make test` 1.48× (docs/PROBES.md),
	// so it gets 60 %.
	tol := 0.3
	if want < 0.8*period.Seconds()*DefaultHz {
		tol = 0.6
	}
	if float64(hotTotal) < (1-tol)*want-5 || float64(hotTotal) > (1+tol)*want+5 || hotTotal < 10 {
		t.Fatalf("hot thread got %d samples in %v, want about %.0f (its CPU time × %d Hz, within %.0f %%) and >= 10", hotTotal, period, want, DefaultHz, 100*tol)
	}
	if got := top(hot, 3); !contains(got, hotFunc) {
		t.Errorf("%s not among the hot thread's top leaf functions %v", hotFunc, got)
	}
	if hot[hotFunc]*10 < hotTotal*8 {
		t.Errorf("%s has %d of the hot thread's %d samples, want >= 80%%", hotFunc, hot[hotFunc], hotTotal)
	}
	if kernelNamed == 0 {
		t.Errorf("no named kernel leaf in the sys thread's samples: %v", top(flat[sysThread], 5))
	}
	// The hot function's callers must be there too (a frame-pointer walk
	// through the Go runtime reaches runtime.goexit).
	var withGoexit bool
	for _, s := range prof.Sample {
		if s.Label["thread"][0] == hotThread {
			last := s.Location[len(s.Location)-1].Line[0].Function.Name
			withGoexit = withGoexit || last == "runtime.goexit"
		}
	}
	if !withGoexit {
		t.Error("no hot-thread stack reaches runtime.goexit: the user stack walk is truncated")
	}

	// go tool pprof reads it.
	if gobin, err := exec.LookPath("go"); err == nil {
		out, err := exec.Command(gobin, "tool", "pprof", "-top", "-nodecount=5", path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), hotFunc) {
			t.Errorf("go tool pprof -top does not show %s:\n%s", hotFunc, out)
		}
		t.Logf("go tool pprof -top:\n%s", out)
	}
}

func top(m map[string]int64, n int) []string {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
	return names[:min(n, len(names))]
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestOverhead measures the BPF program's run time at 99 Hz on every CPU
// while the hot child runs (every sample of the child takes two stack
// walks; samples of other processes only the tgid check).
func TestOverhead(t *testing.T) {
	need.Root(t, "to load BPF programs and read their run time")
	probetest.EnableStats(t)
	pid, _ := startHot(t)
	p := startProbe(t, pid, &probetest.Sink{Dir: t.TempDir()})
	o0, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(2 * time.Second)
	o1, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(t0)
	runs, rt := o1.Runs-o0.Runs, o1.Runtime-o0.Runtime
	if runs == 0 || rt == 0 {
		t.Fatalf("no runs recorded (%d runs, %v)", runs, rt)
	}
	frac := rt.Seconds() / wall.Seconds()
	t.Logf("BPF program: %d runs in %v (%.0f/s on %d CPUs), %d samples of the target, %v total, %.0f ns/run, %.4f%% of one CPU; lost %d, user stacks lost %d",
		runs, wall.Round(time.Millisecond), float64(runs)/wall.Seconds(), runtime.NumCPU(), o1.Samples-o0.Samples, rt,
		float64(rt.Nanoseconds())/float64(runs), 100*frac, o1.Lost, o1.UserStacksLost)
	if rate := float64(runs) / wall.Seconds() / float64(runtime.NumCPU()); rate < 50 || rate > 150 {
		t.Errorf("%.0f runs/s per CPU, want about %d", rate, DefaultHz)
	}
	if frac > 0.01 {
		t.Errorf("BPF program used %.3f%% of a CPU, want < 1%%", 100*frac)
	}
	if o1.Lost != 0 {
		t.Errorf("%d samples lost", o1.Lost)
	}
}
