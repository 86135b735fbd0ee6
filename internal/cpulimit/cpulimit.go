// Package cpulimit restricts the CPU a process tree gets, for asrprof
// sensitivity (docs/CAPACITY.md): a CFS bandwidth quota on a cgroup made
// for it (cgroup v2 cpu.max, or cgroup v1 cpu.cfs_quota_us where the cpu
// controller is still on v1), or a CPU affinity of fewer cores
// (sched_setaffinity on every thread). It also reads the CPU time the
// tree used, from /proc.
package cpulimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/internal/proctree"
	"golang.org/x/sys/unix"
)

// ErrNotSupported is wrapped when this machine cannot restrict a process
// tree's CPU: no cgroup with the cpu controller can be made here.
var ErrNotSupported = errors.New("not supported here")

// Methods, as reports name them.
const (
	CgroupV2 = "cgroup2 cpu.max"
	CgroupV1 = "cgroup1 cpu.cfs_quota_us"
	Affinity = "affinity"
)

// Period is the CFS bandwidth period the quotas are set in (100 ms, the
// kernel's default).
const Period = 100 * time.Millisecond

// Group is a cgroup made for one server, with the cpu controller.
type Group struct {
	Dir    string
	Method string
}

// NewGroup makes the cgroup name under the first hierarchy that has the
// cpu controller (sys is "/sys" but for tests). It returns an error that
// wraps ErrNotSupported, saying what each hierarchy lacked, when
// none can be made.
func NewGroup(sys, name string) (*Group, error) {
	var why []string
	// A cpu controller may be found in the v2 hierarchy (mounted at
	// /sys/fs/cgroup, or at /sys/fs/cgroup/unified beside v1 controllers),
	// then in v1's cpu hierarchy.
	for _, r := range []struct {
		dir string
		v2  bool
	}{
		{filepath.Join(sys, "fs/cgroup"), true},
		{filepath.Join(sys, "fs/cgroup/unified"), true},
		{filepath.Join(sys, "fs/cgroup/cpu"), false},
		{filepath.Join(sys, "fs/cgroup/cpu,cpuacct"), false},
	} {
		if r.v2 {
			ctrl, err := os.ReadFile(filepath.Join(r.dir, "cgroup.controllers"))
			if err != nil {
				why = append(why, r.dir+": not a cgroup v2 hierarchy")
				continue
			}
			if !hasWord(string(ctrl), "cpu") {
				why = append(why, r.dir+": cgroup v2 without the cpu controller (it is on v1 here)")
				continue
			}
			// Let children have the cpu controller.
			sub := filepath.Join(r.dir, "cgroup.subtree_control")
			if cur, _ := os.ReadFile(sub); !hasWord(string(cur), "cpu") {
				if err := os.WriteFile(sub, []byte("+cpu"), 0); err != nil {
					why = append(why, fmt.Sprintf("%s: enabling cpu for children: %v", r.dir, err))
					continue
				}
			}
		} else if _, err := os.Stat(filepath.Join(r.dir, "cpu.cfs_quota_us")); err != nil {
			why = append(why, r.dir+": no cgroup v1 cpu controller")
			continue
		}
		dir := filepath.Join(r.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			why = append(why, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		g := &Group{Dir: dir, Method: CgroupV1}
		if r.v2 {
			g.Method = CgroupV2
		}
		if err := g.SetCores(0); err != nil {
			os.Remove(dir)
			why = append(why, err.Error())
			continue
		}
		return g, nil
	}
	return nil, fmt.Errorf("%w: no cgroup with the cpu controller can be made: %s", ErrNotSupported, strings.Join(why, "; "))
}

func hasWord(s, w string) bool {
	return slices.ContainsFunc(strings.Fields(s), func(f string) bool { return strings.TrimPrefix(f, "+") == w })
}

// SetCores sets the quota to cores CPUs' worth of time per period (0:
// unlimited).
func (g *Group) SetCores(cores float64) error {
	period := strconv.FormatInt(Period.Microseconds(), 10)
	quota := "-1" // unlimited
	if cores > 0 {
		quota = strconv.FormatInt(max(int64(cores*float64(Period.Microseconds())), 1000), 10) // the kernel's minimum, 1 ms
	}
	if g.Method == CgroupV2 {
		if cores <= 0 {
			quota = "max"
		}
		return write(filepath.Join(g.Dir, "cpu.max"), quota+" "+period)
	}
	if err := write(filepath.Join(g.Dir, "cpu.cfs_period_us"), period); err != nil {
		return err
	}
	return write(filepath.Join(g.Dir, "cpu.cfs_quota_us"), quota)
}

func write(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		return fmt.Errorf("writing %q to %s: %w", v, path, err)
	}
	return nil
}

// AddTree moves pid and its descendants (every thread) into g; children
// they start later are born in it.
func (g *Group) AddTree(pid int) error {
	pids := proctree.Descendants(pid)
	if len(pids) == 0 {
		return fmt.Errorf("process %d is gone", pid)
	}
	for _, p := range pids {
		if err := write(filepath.Join(g.Dir, "cgroup.procs"), strconv.Itoa(p)); err != nil && proctree.Alive(p) {
			return err
		}
	}
	return nil
}

// Throttled reads how often and how long the quota held g back (cpu.stat
// nr_throttled and throttled_usec, v1's throttled_time in ns).
func (g *Group) Throttled() (periods, throttled int64, err error) {
	b, err := os.ReadFile(filepath.Join(g.Dir, "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_throttled":
			periods = n
		case "throttled_usec":
			throttled = n
		case "throttled_time":
			throttled = n / 1000
		}
	}
	return periods, throttled, nil
}

// Remove deletes g once its processes are gone (moving any left to the
// parent group first).
func (g *Group) Remove() error {
	if b, err := os.ReadFile(filepath.Join(g.Dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			os.WriteFile(filepath.Join(filepath.Dir(g.Dir), "cgroup.procs"), []byte(f), 0)
		}
	}
	var err error
	for i := 0; i < 50; i++ { // the kernel frees a group a moment after its last task exits
		if err = os.Remove(g.Dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", g.Dir, err)
}

// CPUs returns the CPUs pid may run on.
func CPUs(pid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity(%d): %w", pid, err)
	}
	var out []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// PinTree restricts every thread of pid and its descendants to cpus.
func PinTree(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	n := 0
	for _, p := range proctree.Descendants(pid) {
		for _, tid := range proctree.Threads(p) {
			if err := unix.SchedSetaffinity(tid, &set); err != nil && proctree.Alive(p) {
				return fmt.Errorf("sched_setaffinity(%d): %w", tid, err)
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("process %d is gone", pid)
	}
	return nil
}

// ThreadCPUSeconds returns the CPU seconds each thread of pid's process
// tree has used (schedstat's run time), by thread id; threads whose
// schedstat cannot be read are left out.
func ThreadCPUSeconds(pid int) map[int]float64 {
	out := map[int]float64{}
	for _, p := range proctree.Descendants(pid) {
		for _, tid := range proctree.Threads(p) {
			if st, err := proctree.ReadSchedstat(p, tid); err == nil {
				out[tid] = float64(st.RunNs) / 1e9
			}
		}
	}
	return out
}

// TreeCPUSeconds is the CPU time of pid and its live descendants, every
// live thread: the scheduler's run time in ns (/proc/PID/task/TID/schedstat),
// or /proc/PID/stat's user + system ticks (10 ms) where schedstat is
// missing. Threads and children that already exited are not counted.
func TreeCPUSeconds(pid int) float64 {
	var ns, ticks uint64
	buf := make([]byte, 4096)
	for _, p := range proctree.Descendants(pid) {
		read := 0
		for _, tid := range proctree.Threads(p) {
			if st, err := proctree.ReadSchedstat(p, tid); err == nil { // a thread that just exited is skipped
				ns += st.RunNs
				read++
			}
		}
		if read > 0 {
			continue
		}
		if b, err := proctree.ReadSmall("/proc/"+strconv.Itoa(p)+"/stat", buf); err == nil {
			if st, err := proctree.ParseStat(string(b)); err == nil {
				ticks += st.Utime + st.Stime
			}
		}
	}
	return float64(ns)/1e9 + float64(ticks)/proctree.UserHZ
}
