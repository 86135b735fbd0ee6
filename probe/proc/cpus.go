package proc

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// The per-core record of a period (CPUsFile, proc_cpus.jsonl): every
// core's time from /proc/stat, the target tree's and asrprof's own CPU
// time put on the cores their threads ran on, and the busiest processes
// outside both. It records; the co-tenant check (analysis/engine) reads.

// CPUsFile is the bundle file of the per-core records.
const CPUsFile = bundle.CPUsFile

// MaxOtherProcesses bounds the other processes recorded a period: the
// busiest, by CPU time in it (a host runs hundreds; the few busiest are
// the ones a co-tenant finding names).
const MaxOtherProcesses = 8

// coreTicks is one core's cumulative /proc/stat counters, in USER_HZ ticks.
type coreTicks struct{ busy, idle, steal uint64 }

// ParseProcStat reads the per-core lines ("cpuN user nice system idle
// iowait irq softirq steal ...") of /proc/stat's text.
func ParseProcStat(s string) (map[int]coreTicks, error) {
	out := map[int]coreTicks{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			return nil, fmt.Errorf("parsing /proc/stat: %q: %w", f[0], err)
		}
		var v [8]uint64
		for i := range v {
			if i+1 >= len(f) {
				break
			}
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("parsing /proc/stat: %s field %d: %w", f[0], i+1, err)
			}
		}
		// user nice system idle iowait irq softirq steal (guest time is
		// counted in user already)
		out[n] = coreTicks{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parsing /proc/stat: no per-core line")
	}
	return out, nil
}

// procTicks is a process's cumulative CPU (utime + stime, ticks), its
// start (ticks since boot), command and last core.
type procTicks struct {
	cpu, start uint64
	comm       string
	core       int
}

// cores is the per-core state of the period in progress.
type cores struct {
	base    map[int]coreTicks
	others  map[int]procTicks // the other processes at the period's start
	target  map[int]uint64    // ns a core, the target tree's threads
	self    map[int]uint64    // ns a core, asrprof's own threads
	selfPID int
	selfAt  map[int]sample // asrprof's threads at the last sample
	off     string         // why there is no per-core record ("" when there is)
}

func readCores() (map[int]coreTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	return ParseProcStat(string(b))
}

// begin takes the period's baseline: /proc/stat and every other process.
func (c *cores) begin(tree []int, buf []byte) {
	c.target, c.self = map[int]uint64{}, map[int]uint64{}
	if c.off != "" {
		return
	}
	var err error
	if c.base, err = readCores(); err != nil {
		c.off = "no per-core record (" + CPUsFile + "): " + err.Error()
	}
	c.others = otherProcesses(tree, c.selfPID, buf)
}

// attribute puts a thread's CPU time since its previous sample on the core
// it is on now.
func attribute(m map[int]uint64, prev, now sample, seen bool) {
	if seen && prev.pid == now.pid && now.cpuNs > prev.cpuNs && now.core >= 0 {
		m[now.core] += now.cpuNs - prev.cpuNs
	}
}

// sampleSelf reads asrprof's own threads and puts their CPU time on their
// cores.
func (c *cores) sampleSelf(useSchedstat bool, buf []byte) {
	if c.off != "" {
		return
	}
	now := map[int]sample{}
	for _, tid := range proctree.Threads(c.selfPID) {
		s, err := readThreadCPU(c.selfPID, tid, useSchedstat, buf)
		if err != nil {
			continue
		}
		prev, seen := c.selfAt[tid]
		attribute(c.self, prev, s, seen)
		now[tid] = s
	}
	c.selfAt = now
}

// otherProcesses reads every process on the host but the target tree's
// and pid self.
func otherProcesses(tree []int, self int, buf []byte) map[int]procTicks {
	skip := map[int]bool{self: true}
	for _, p := range tree {
		skip[p] = true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[int]procTicks{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		b, err := proctree.ReadSmall("/proc/"+e.Name()+"/stat", buf)
		if err != nil {
			continue
		}
		st, err := proctree.ParseStat(string(b))
		if err != nil {
			continue
		}
		out[pid] = procTicks{cpu: st.Utime + st.Stime, start: st.Start, comm: st.Comm, core: st.Processor}
	}
	return out
}

// end makes the period's records: one a core, then the busiest other
// processes.
func (c *cores) end(tree []int, level string, repeat int, warmup bool, wall float64, buf []byte) []bundle.CPURecord {
	if c.off != "" || c.base == nil {
		return nil
	}
	now, err := readCores()
	if err != nil {
		return nil
	}
	tick := 1.0 / proctree.UserHZ
	var out []bundle.CPURecord
	for _, n := range slices.Sorted(maps.Keys(now)) {
		a, b := now[n], c.base[n]
		out = append(out, bundle.CPURecord{Level: level, Repeat: repeat, Warmup: warmup, Kind: bundle.CPUKindCore, WallS: wall, CPU: n,
			CPUCore: &bundle.CPUCore{
				BusyS: float64(watch.Sub(a.busy, b.busy)) * tick, IdleS: float64(watch.Sub(a.idle, b.idle)) * tick,
				StealS:  float64(watch.Sub(a.steal, b.steal)) * tick,
				TargetS: float64(c.target[n]) / 1e9, SelfS: float64(c.self[n]) / 1e9,
			}})
	}
	type used struct {
		pid int
		p   procTicks
		cpu uint64
	}
	var us []used
	for pid, p := range otherProcesses(tree, c.selfPID, buf) {
		d := p.cpu
		if b, ok := c.others[pid]; ok && b.start == p.start {
			d = watch.Sub(p.cpu, b.cpu)
		}
		if d > 0 {
			us = append(us, used{pid, p, d})
		}
	}
	slices.SortFunc(us, func(x, y used) int { return cmp.Or(cmp.Compare(y.cpu, x.cpu), cmp.Compare(x.pid, y.pid)) })
	for _, u := range us[:min(len(us), MaxOtherProcesses)] {
		out = append(out, bundle.CPURecord{Level: level, Repeat: repeat, Warmup: warmup, Kind: bundle.CPUKindProcess, WallS: wall, CPU: u.p.core,
			CPUProcess: &bundle.CPUProcess{PID: u.pid, Comm: u.p.comm, CPUS: float64(u.cpu) * tick, Allowed: cpusAllowed(u.pid, buf)}})
	}
	c.base, c.others = now, nil
	c.target, c.self = map[int]uint64{}, map[int]uint64{}
	return out
}

// cpusAllowed is status's Cpus_allowed_list of pid ("" when unread).
func cpusAllowed(pid int, buf []byte) string {
	b, err := proctree.ReadSmall("/proc/"+strconv.Itoa(pid)+"/status", buf)
	if err != nil {
		return ""
	}
	v, _ := proctree.StatusField(string(b), "Cpus_allowed_list")
	return v
}
