package cpulimit

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Allowed is how many cores' worth of CPU time process pid may use: the
// number of CPUs its affinity allows, or less where a CFS bandwidth quota
// of its cgroup, or of a cgroup above it, says less (cgroup v2 cpu.max,
// v1 cpu.cfs_quota_us / cpu.cfs_period_us). sys is "/sys" but for tests;
// proc is "/proc" but for tests.
func Allowed(sys, proc string, pid int) (float64, error) {
	cpus, err := CPUs(pid)
	if err != nil {
		return 0, err
	}
	cores := float64(len(cpus))
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return cores, nil // no cgroups here: the affinity is the limit
	}
	if q := quotaCores(sys, string(b)); q > 0 {
		cores = math.Min(cores, q)
	}
	return cores, nil
}

// quotaCores is the smallest CFS quota, in cores, on the path of the
// cgroups /proc/PID/cgroup names (0: no quota).
func quotaCores(sys, cgroup string) float64 {
	best := 0.0
	take := func(q float64) {
		if q > 0 && (best == 0 || q < best) {
			best = q
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(cgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		if ctrls == "" { // v2
			for _, r := range []string{"fs/cgroup", "fs/cgroup/unified"} {
				walkUp(filepath.Join(sys, r), path, func(dir string) { take(readV2(dir)) })
			}
			continue
		}
		if !hasWord(strings.ReplaceAll(ctrls, ",", " "), "cpu") {
			continue
		}
		for _, r := range []string{"fs/cgroup/cpu", "fs/cgroup/cpu,cpuacct", "fs/cgroup/" + ctrls} {
			walkUp(filepath.Join(sys, r), path, func(dir string) { take(readV1(dir)) })
		}
	}
	return best
}

// walkUp calls f on root/path and each directory above it up to root.
func walkUp(root, path string, f func(dir string)) {
	if _, err := os.Stat(root); err != nil {
		return
	}
	p := filepath.Clean("/" + path)
	for {
		f(filepath.Join(root, p))
		if p == "/" {
			return
		}
		p = filepath.Dir(p)
	}
}

// readV2 is cpu.max's quota in cores (0: max, or no file).
func readV2(dir string) float64 {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0
	}
	return ratio(f[0], f[1])
}

// readV1 is cpu.cfs_quota_us / cpu.cfs_period_us in cores (0: -1, or no file).
func readV1(dir string) float64 {
	q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func ratio(quota, period string) float64 {
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return q / p
}
