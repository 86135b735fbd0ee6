package runbook

// The calibrated co-runner (--cpu-method corunner): one spinning process
// per CPU the server is pinned to, at the server's nice (or the nice whose
// weight gives the share asked for), so that a thread that computes all
// the time gets about the share of its core and one that mostly sleeps is
// barely delayed (EEVDF keeps a sleeper's lag: it runs soon after it wakes).
// The premise is measured by TestSensitivityCoRunnerPremise (docs/CAPACITY.md).
//
// A spinner is this executable, re-executed with corunnerEnv set: the
// init below turns that process into the spinner before anything else of
// the program runs, so it needs no subcommand and works from test
// binaries too.

import (
	"bufio"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/internal/cpulimit"
	"github.com/asrprof/asrprof/internal/proctree"
	"golang.org/x/sys/unix"
)

// corunnerEnv, when set ("CPU NICE PPID"), makes this process a spinner.
const corunnerEnv = "ASRPROF_CORUNNER_SPIN"

func init() {
	if v := os.Getenv(corunnerEnv); v != "" {
		spinMain(v)
	}
}

// spinMain pins the calling thread to its CPU at its nice, says "ready"
// on stdout and spins until its parent is gone (or it is killed). It never
// returns.
func spinMain(v string) {
	var cpu, nice, ppid int
	if _, err := fmt.Sscanf(v, "%d %d %d", &cpu, &nice, &ppid); err != nil {
		fmt.Fprintf(os.Stderr, "co-runner: %s=%q: %v\n", corunnerEnv, v, err)
		os.Exit(2)
	}
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintf(os.Stderr, "co-runner: sched_setaffinity(CPU %d): %v\n", cpu, err)
		os.Exit(2)
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice); err != nil {
		fmt.Fprintf(os.Stderr, "co-runner: setpriority(nice %d): %v\n", nice, err)
		os.Exit(2)
	}
	fmt.Println("ready")
	var x uint64
	for {
		for i := 0; i < 1<<22; i++ { // a few ms
			x = x*6364136223846793005 + 1442695040888963407
		}
		if os.Getppid() != ppid || x == 42 {
			os.Exit(0)
		}
	}
}

// coRunners are the spinners of one run.
type coRunners struct{ spinners []*exec.Cmd }

// startCoRunners starts one spinner on each of cpus at nice and waits
// until each has pinned itself.
func startCoRunners(cpus []int, nice int) (*coRunners, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("co-runner: %w", err)
	}
	c := &coRunners{}
	for _, cpu := range cpus {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d", corunnerEnv, cpu, nice, os.Getpid()))
		// No Pdeathsig: it follows the thread that forked, which Go may
		// retire; the spinner watches its parent instead.
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			c.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, fmt.Errorf("co-runner: starting %s: %w", exe, err)
		}
		c.spinners = append(c.spinners, cmd)
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			cmd.Wait()
			c.stop()
			return nil, fmt.Errorf("co-runner on CPU %d did not start: %s", cpu, strings.TrimSpace(errb.String()))
		}
	}
	return c, nil
}

// cpuSeconds is the spinners' CPU time so far.
func (c *coRunners) cpuSeconds() float64 {
	var s float64
	for _, sp := range c.spinners {
		if sp.Process != nil {
			if st, err := proctree.ReadSchedstat(sp.Process.Pid, sp.Process.Pid); err == nil {
				s += float64(st.RunNs) / 1e9
			}
		}
	}
	return s
}

// stop kills and reaps every spinner.
func (c *coRunners) stop() {
	for _, sp := range c.spinners {
		if sp.Process != nil {
			sp.Process.Kill()
			sp.Wait()
		}
	}
	c.spinners = nil
}

// prioToWeight is the kernel's sched_prio_to_weight: the load weight of
// nice -20 … 19.
var prioToWeight = [40]float64{
	88761, 71755, 56483, 46273, 36291,
	29154, 23254, 18705, 14949, 11916,
	9548, 7620, 6100, 4904, 3906,
	3121, 2501, 1991, 1586, 1277,
	1024, 820, 655, 526, 423,
	335, 272, 215, 172, 137,
	110, 87, 70, 56, 45,
	36, 29, 23, 18, 15,
}

func weightOf(nice int) float64 { return prioToWeight[min(max(nice, -20), 19)+20] }

// spinnerNice is the nice a spinner beside a thread at serverNice takes so
// that the thread keeps share of its CPU while both want it (the weights
// split the CPU: w_server / (w_server + w_spinner)), and the share that
// nice gives. 50 % is the server's own nice.
func spinnerNice(serverNice int, share float64) (int, float64) {
	ws := weightOf(serverNice)
	want := ws * (1 - share) / share
	best, bestErr := serverNice, math.Inf(1)
	for n := -20; n <= 19; n++ {
		if e := math.Abs(math.Log(weightOf(n) / want)); e < bestErr-1e-12 {
			best, bestErr = n, e
		}
	}
	return best, ws / (ws + weightOf(best))
}

// niceOf is the nice of thread tid of pid (field 19 of its stat).
func niceOf(pid, tid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(rest) < 17 {
		return 0, fmt.Errorf("/proc/%d/task/%d/stat: too few fields", pid, tid)
	}
	return strconv.Atoi(rest[16])
}

// schedGroup is the scheduling group a process competes in: its autogroup
// and its cpu cgroup. A spinner only takes the share its weight says from
// threads of the same group; between groups the groups share.
func schedGroup(pid int) string {
	var parts []string
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid)); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 0 {
			parts = append(parts, f[0])
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.SplitN(l, ":", 3)
			if len(f) == 3 && (f[0] == "0" || slices.Contains(strings.Split(f[1], ","), "cpu")) {
				parts = append(parts, f[1]+":"+f[2])
			}
		}
	}
	return strings.Join(parts, " ")
}

// coRunnerLimit is the co-runner method for one restricted run: pin every
// thread of the server tree to k of its CPUs (k = the base, c's whole
// cores) and start a spinner on each, at the nice that leaves the server
// share (< 1).
func coRunnerLimit(pid int, share float64, c capacity, sr *bundle.SensitivityRun) (*limiter, error) {
	base := c.cores
	cpus, err := cpulimit.CPUs(pid)
	if err != nil {
		return nil, err
	}
	k := int(math.Round(base))
	if k < 1 || math.Abs(base-float64(k)) > 1e-9 {
		return nil, fmt.Errorf("co-runner: 100 %% must be whole cores, not %g (--cpu-base)", base)
	}
	if k > len(cpus) {
		return nil, fmt.Errorf("co-runner: 100 %% is %d cores, but the server may run on %d CPUs", k, len(cpus))
	}
	sr.BaseCores, sr.CPUs = base, k
	set := cpus[len(cpus)-k:]
	if err := cpulimit.PinTree(pid, set); err != nil {
		return nil, err
	}
	sn, err := niceOf(pid, pid)
	if err != nil {
		return nil, err
	}
	nice, got := spinnerNice(sn, share)
	if math.Abs(got-share) > 0.03 {
		return nil, fmt.Errorf("co-runner: no nice gives a share of %s %% beside a thread at nice %d (the nearest, nice %d, gives %s %%)", pct(share), sn, nice, pct(got))
	}
	spin, err := startCoRunners(set, nice)
	if err != nil {
		return nil, err
	}
	l := &limiter{method: MethodCoRunner, note: coRunnerNote, spin: spin, spinStart: spin.cpuSeconds(), spinAt: time.Now(), spinShare: got, ran: c.ran}
	sr.Effective = got
	sr.CoRunnerNice = &nice
	if g, s := schedGroup(pid), schedGroup(spin.spinners[0].Process.Pid); g != s {
		l.warn = fmt.Sprintf("the server (%s) and the co-runner (%s) are in different scheduling groups: the spinner takes the share of a group, not %s %%", g, s, pct(1-got))
	}
	return l, nil
}
