// Package doctor checks whether this machine and target can be profiled,
// and says how to fix what is missing: privileges (root, or CAP_BPF and
// CAP_PERFMON), kernel BTF, tracefs, perf events, eBPF program loading,
// the memlock rlimit, NVML and the driver, GPM, the clock offset between
// NVML timestamps and the system clock, and, when asked, whether the
// target server answers and which process it is.
//
// Check is Decide(Gather(...)): Gather touches the world (reads /proc and
// /sys, opens a perf event, loads a trivial socket filter, initialises
// NVML, calls the target) and records what it saw in Facts; Decide is pure
// and turns Facts into Findings, so tests feed it fake Facts.
//
// Permissions: none needed to run; without them the findings say what is
// missing. Cost: well under a second, plus up to the NVML and HTTP
// timeouts when those hang (Options.Timeout, 3 s each).
package doctor
