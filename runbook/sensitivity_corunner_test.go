package runbook

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/internal/proctree"
	"golang.org/x/sys/unix"
)

func TestSensitivitySpinnerNice(t *testing.T) {
	for _, tc := range []struct {
		server   int
		share    float64
		wantNice int
		wantGot  float64
	}{
		{0, 0.5, 0, 0.5},
		{5, 0.5, 5, 0.5},
		{0, 0.75, 5, 1024.0 / (1024 + 335)},
		{0, 0.25, -5, 1024.0 / (1024 + 3121)},
	} {
		n, got := spinnerNice(tc.server, tc.share)
		if n != tc.wantNice || math.Abs(got-tc.wantGot) > 1e-9 {
			t.Errorf("spinnerNice(%d, %g) = %d, %g; want %d, %g", tc.server, tc.share, n, got, tc.wantNice, tc.wantGot)
		}
	}
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// computeFor burns d of this thread's CPU time (fixed work: it takes
// longer in wall time when the thread gets less of its CPU).
func computeFor(d time.Duration) {
	end := threadCPU() + d
	for threadCPU() < end {
	}
}

// A pattern runs on a thread pinned to one CPU for about wall and
// returns its rate (CPU share for the busy loop, iterations per second for
// the others) and the mean length of its turns on the CPU (its run time
// over its timeslices, from schedstat).
type pattern struct {
	name string
	run  func(wall time.Duration) float64
}

// turn is the mean time on the CPU per timeslice of this thread since s0.
func turn(tid int, s0 proctree.Schedstat) time.Duration {
	s1, err := proctree.ReadSchedstat(os.Getpid(), tid)
	if err != nil || s1.Slices == s0.Slices {
		return 0
	}
	return time.Duration((s1.RunNs - s0.RunNs) / (s1.Slices - s0.Slices))
}

var premisePatterns = []pattern{
	{"busy loop (computes all the time)", func(wall time.Duration) float64 {
		c0, t0 := threadCPU(), time.Now()
		for time.Since(t0) < wall {
		}
		return float64(threadCPU()-c0) / float64(time.Since(t0))
	}},
	{"sleeps 9 ms, computes 1 ms", func(wall time.Duration) float64 {
		t0, n := time.Now(), 0
		for time.Since(t0) < wall {
			time.Sleep(9 * time.Millisecond)
			computeFor(time.Millisecond)
			n++
		}
		return float64(n) / time.Since(t0).Seconds()
	}},
	{"computes 1 ms, spin-waits 9 ms (a GPU sync that spins)", func(wall time.Duration) float64 {
		t0, n := time.Now(), 0
		for time.Since(t0) < wall {
			computeFor(time.Millisecond)
			w := time.Now()
			for time.Since(w) < 9*time.Millisecond {
			}
			n++
		}
		return float64(n) / time.Since(t0).Seconds()
	}},
}

// onPinnedThread runs f on a fresh OS thread pinned to cpu, the thread's
// id given to before (which may move it) and after.
func onPinnedThread(cpu int, before func(tid int) error, f func(), after func(tid int)) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- err
			return
		}
		tid := unix.Gettid()
		if before != nil {
			if err := before(tid); err != nil {
				errc <- err
				return
			}
		}
		f()
		if after != nil {
			after(tid)
		}
		errc <- nil
	}()
	return <-errc
}

// The co-runner's premise, measured on this machine (docs/CAPACITY.md,
// "The co-runner's premise"): on one pinned CPU, a spinner at the same
// nice takes about half of a thread that computes all the time, and
// barely delays one that sleeps 9 ms and computes 1 ms (EEVDF keeps the
// sleeper's lag, so it runs soon after it wakes). Beside them, the same
// patterns under a CFS quota of half a core (cgroup v1, where a thread
// can be moved alone): the quota halves the busy loop too, leaves the
// sleeper alone, and halves the thread that spin-waits, where the
// co-runner costs it only its compute and the slice it waits for.
//
// Each round runs every pattern alone, beside the spinner and under the
// quota, half a second each, in a rotating order; the machine's other load
// moves the absolute rates, so each ratio is taken within its round.
func TestSensitivityCoRunnerPremise(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute of pinned busy loops")
	}
	cpus, err := cpulimit.CPUs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cpu := cpus[len(cpus)-1]
	nice, err := niceOf(os.Getpid(), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The quota: a v1 cpu cgroup takes a single thread (its tasks file).
	var g *cpulimit.Group
	if gg, err := cpulimit.NewGroup("/sys", fmt.Sprintf("asrprof-premise-%d", os.Getpid())); err == nil && gg.Method == cpulimit.CgroupV1 {
		g = gg
		defer g.Remove()
		if err := g.SetCores(0.5); err != nil {
			t.Fatal(err)
		}
	} else if err == nil {
		gg.Remove()
		t.Logf("cgroup v2: a thread cannot join a group alone; no quota column")
	} else {
		t.Logf("no cgroup (%v): no quota column", err)
	}
	rounds, wall := 10, 500*time.Millisecond
	if s := os.Getenv("ASRPROF_PREMISE_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	conds := []string{"alone", "co-runner", "quota"}
	if g == nil {
		conds = conds[:2]
	}
	type key struct{ pat, cond string }
	ratios := map[key][]float64{}
	turns := map[key][]float64{} // ms
	// Beside the co-runner, the pattern's CPU time over its and the
	// spinner's together, over the same half second: the pattern's share
	// of what the two got, whatever else the machine ran.
	splits := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		for _, p := range premisePatterns {
			rate := map[string]float64{}
			order := slices.Clone(conds)
			for i := 0; i < r%len(order); i++ {
				order = append(order[1:], order[0])
			}
			for _, c := range order {
				var x float64
				var before func(int) error
				var after func(int)
				var sp *coRunners
				switch c {
				case "co-runner":
					if sp, err = startCoRunners([]int{cpu}, nice); err != nil {
						t.Fatal(err)
					}
					after = func(int) { sp.stop() }
				case "quota":
					before = func(tid int) error {
						return os.WriteFile(filepath.Join(g.Dir, "tasks"), []byte(strconv.Itoa(tid)), 0)
					}
					after = func(tid int) {
						os.WriteFile(filepath.Join(filepath.Dir(g.Dir), "tasks"), []byte(strconv.Itoa(tid)), 0)
					}
				}
				var tu time.Duration
				var s0 proctree.Schedstat
				var tid int
				b := func(id int) error {
					tid = id
					s0, _ = proctree.ReadSchedstat(os.Getpid(), id)
					if before != nil {
						return before(id)
					}
					return nil
				}
				run := func() {
					c0, sp0 := threadCPU(), 0.0
					if sp != nil {
						sp0 = sp.cpuSeconds()
					}
					x = p.run(wall)
					tu = turn(tid, s0)
					if sp != nil {
						own := (threadCPU() - c0).Seconds()
						splits[p.name] = append(splits[p.name], own/(own+sp.cpuSeconds()-sp0))
					}
				}
				if err := onPinnedThread(cpu, b, run, after); err != nil {
					t.Fatal(err)
				}
				rate[c] = x
				turns[key{p.name, c}] = append(turns[key{p.name, c}], float64(tu)/1e6)
			}
			for _, c := range conds[1:] {
				ratios[key{p.name, c}] = append(ratios[key{p.name, c}], rate[c]/rate["alone"])
			}
			t.Logf("round %d %-52s alone %.3f  co-runner %.3f  quota %.3f", r+1, p.name, rate["alone"], rate["co-runner"], rate["quota"])
		}
	}
	med := func(xs []float64) (m, lo, hi float64) {
		s := slices.Sorted(slices.Values(xs))
		return s[len(s)/2], s[0], s[len(s)-1]
	}
	t.Logf("CPU %d of %d, nice %d, %d rounds of %v; rate beside the co-runner (and under a 0.5-core quota) / rate alone: median [min, max]", cpu, len(cpus), nice, rounds, wall)
	for _, p := range premisePatterns {
		line := fmt.Sprintf("%-52s", p.name)
		for _, c := range conds[1:] {
			m, lo, hi := med(ratios[key{p.name, c}])
			line += fmt.Sprintf("  %s %.2f [%.2f, %.2f] (sensitivity %.2f)", c, m, lo, hi, (m-1)/(0.5-1))
		}
		t.Log(line)
		line = fmt.Sprintf("%-52s  turn on the CPU (ms, median):", "")
		for _, c := range conds {
			m, _, _ := med(turns[key{p.name, c}])
			line += fmt.Sprintf(" %s %.2f", c, m)
		}
		t.Log(line)
	}
	for _, p := range premisePatterns {
		m, lo, hi := med(splits[p.name])
		t.Logf("%-52s  its share of its and the spinner's CPU time: %.2f [%.2f, %.2f]", p.name, m, lo, hi)
	}
	// Generous bounds on the medians. Measured (docs/CAPACITY.md): the busy
	// loop beside the spinner kept 0.50, 0.53, 0.54 and 0.57 of its share alone
	// on this shared 2-core machine (load 1 to 10; single rounds 0.40 to
	// 2.44), 0.51 on an idle 16-core host; the sleeper 0.93, 0.93, 0.97,
	// 1.19 and 0.94. That ratio moves with the other load on the CPU: a CI
	// run beside other packages' tests read 0.74 (in 7 of its 10 rounds the
	// busy loop alone got 0.25 to 0.55 of the CPU). So the premise is checked
	// on the split, the busy loop's share of its and the spinner's CPU time
	// within each half second, which a third thread leaves at a half: within
	// [0.35, 0.65]. The sleeper: ≥ 0.8 of its rate alone.
	if m, _, _ := med(splits[premisePatterns[0].name]); m < 0.35 || m > 0.65 {
		t.Errorf("the busy loop beside a spinner got %.2f of their CPU time together, want about half", m)
	}
	if m, _, _ := med(ratios[key{premisePatterns[1].name, "co-runner"}]); m < 0.8 {
		t.Errorf("the sleeper beside a spinner ran at %.2f of its rate alone, want little delay", m)
	}
}
