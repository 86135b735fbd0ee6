package bundle

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// CPUsFile holds the proc probe's per-core accounting of each period: for
// every core of the host, its time from /proc/stat and the part of it the
// target's process tree and asrprof's own process ran there; and the
// processes outside both that used CPU in the period. It records; the
// validity check's co-tenant rule (analysis/engine) interprets.
const CPUsFile = "proc_cpus.jsonl"

// The kinds of a CPURecord.
const (
	CPUKindCore    = "core"
	CPUKindProcess = "process"
)

// CPURecord is one line of proc_cpus.jsonl: one core, or one other
// process, over one period. Kind says which part is set.
type CPURecord struct {
	Level  string  `json:"level"`
	Repeat int     `json:"repeat"`
	Warmup bool    `json:"warmup"`
	Kind   string  `json:"kind"`
	WallS  float64 `json:"wall_s"`
	// CPU is the core (kind core), or the core the process last ran on
	// at the period's end (kind process).
	CPU int `json:"cpu"`
	*CPUCore
	*CPUProcess
}

// CPUCore is a core's time over a period (kind core).
type CPUCore struct {
	// BusyS, IdleS, StealS: /proc/stat's counters of the core over the
	// period: user, nice, system, irq and softirq; idle and iowait; steal
	// (the hypervisor running something else on the virtual core).
	BusyS  float64 `json:"busy_s"`
	IdleS  float64 `json:"idle_s"`
	StealS float64 `json:"steal_s"`
	// TargetS and SelfS are the CPU time of the target's process tree's
	// threads and of asrprof's own process's that ran on this core,
	// sampled: a thread's CPU time between two of the probe's samples is
	// put on the core it was on at the later one (/proc/PID/task/TID/stat
	// field 39).
	TargetS float64 `json:"target_s"`
	SelfS   float64 `json:"self_s"`
}

// CPUProcess is a process outside the target's tree, and not asrprof
// itself, that used CPU in the period (kind process; the busiest few,
// probe/proc's MaxOtherProcesses, read from /proc/PID/stat at the
// period's start and end).
type CPUProcess struct {
	PID  int     `json:"pid"`
	Comm string  `json:"comm"`
	CPUS float64 `json:"cpu_s"`
	// Allowed is the cores it may run on (status's Cpus_allowed_list).
	Allowed string `json:"cpus_allowed"`
}

// ParseCPUList parses a kernel CPU list such as "0-3,5,7-8" (the
// online CPUs, a process's Cpus_allowed_list).
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, errLo := strconv.Atoi(lo)
		b, errHi := strconv.Atoi(hi)
		if err := cmp.Or(errLo, errHi); err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		if b < a {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cpu list %q: empty", s)
	}
	return out, nil
}
