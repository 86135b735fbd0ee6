package probetest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/internal/proctree"
)

// Machine is what this machine offers the probes: the facts that decide
// whether a probe's probe.ErrNotSupported is this machine's doing (it
// cannot) or the probe's (it broke).
type Machine struct {
	EUID     int
	CapEff   uint64 // effective capabilities (/proc/self/status)
	BTF      bool   // /sys/kernel/btf/vmlinux exists
	Paranoid int    // kernel.perf_event_paranoid; -2: no such file (no perf events)
	Memlock  unix.Rlimit
	Release  string // uname -r
	Major    int    // kernel version
	Minor    int
	Seccomp  int  // 0 none, 1 strict, 2 filter (/proc/self/status)
	Uprobes  bool // the uprobe PMU, /sys/bus/event_source/devices/uprobe
}

// ReadMachine reads the facts of this machine and process.
func ReadMachine() Machine {
	m := Machine{EUID: os.Geteuid(), Paranoid: -2}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		v, _ := proctree.StatusField(string(b), "CapEff")
		m.CapEff, _ = strconv.ParseUint(v, 16, 64)
		v, _ = proctree.StatusField(string(b), "Seccomp")
		m.Seccomp, _ = strconv.Atoi(v)
	}
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	m.BTF = err == nil
	if b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			m.Paranoid = n
		}
	}
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &m.Memlock)
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Release = unix.ByteSliceToString(u.Release[:])
		fmt.Sscanf(m.Release, "%d.%d", &m.Major, &m.Minor)
	}
	_, err = os.Stat("/sys/bus/event_source/devices/uprobe")
	m.Uprobes = err == nil
	return m
}

func (m Machine) has(capability uint) bool { return m.CapEff&(1<<capability) != 0 }

// A check returns what m lacks for one requirement of a probe, or "".
type check func(m Machine) string

func privileged(m Machine) string {
	if m.has(unix.CAP_SYS_ADMIN) || (m.has(unix.CAP_BPF) && m.has(unix.CAP_PERFMON)) {
		return ""
	}
	return fmt.Sprintf("no CAP_SYS_ADMIN, nor CAP_BPF with CAP_PERFMON (euid %d, CapEff %#x): loading BPF programs needs them, root has them", m.EUID, m.CapEff)
}

func btf(m Machine) string {
	if m.BTF {
		return ""
	}
	return "no kernel BTF (/sys/kernel/btf/vmlinux missing)"
}

func perfEvents(m Machine) string {
	switch {
	case m.Paranoid == -2:
		return "no perf events (/proc/sys/kernel/perf_event_paranoid missing)"
	case m.has(unix.CAP_PERFMON) || m.has(unix.CAP_SYS_ADMIN) || m.Paranoid <= 0:
		return ""
	}
	return fmt.Sprintf("perf_event_paranoid %d without CAP_PERFMON: CPU-wide perf events need ≤ 0", m.Paranoid)
}

// memlock is what cilium/ebpf's rlimit.RemoveMemlock needs: nothing from
// kernel 5.11 on (BPF memory is charged to the cgroup) where it may
// create the map it tells that by; before 5.11, or without the privilege
// to create a map, an unlimited RLIMIT_MEMLOCK or the right to raise it.
func memlock(m Machine) string {
	memcg := m.Major > 5 || (m.Major == 5 && m.Minor >= 11)
	priv := privileged(m)
	if memcg && priv == "" {
		return ""
	}
	s := memlockUnlimited(m)
	if s != "" && priv != "" {
		s += "; " + priv
	}
	return s
}

// memlockUnlimited is what the OpenTelemetry eBPF profiler needs on any
// kernel: RLIMIT_MEMLOCK raised to unlimited.
func memlockUnlimited(m Machine) string {
	if m.Memlock.Max == unix.RLIM_INFINITY || m.has(unix.CAP_SYS_RESOURCE) {
		return ""
	}
	return fmt.Sprintf("RLIMIT_MEMLOCK %s (hard) and no CAP_SYS_RESOURCE to raise it to unlimited", mib(m.Memlock.Max))
}

func seccomp(m Machine) string {
	if m.Seccomp != 2 {
		return ""
	}
	return "a seccomp filter (Seccomp: 2 in /proc/self/status), which may refuse bpf() and perf_event_open()"
}

func uprobes(m Machine) string {
	if m.Uprobes {
		return ""
	}
	return "no uprobe PMU (/sys/bus/event_source/devices/uprobe missing: kernel without CONFIG_UPROBE_EVENTS)"
}

func kernelFeature(m Machine) string {
	return "kernel " + m.Release + " lacks a BPF feature the probe uses"
}

func mib(n uint64) string {
	if n == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// needs is, by probe name (probe.Probe's Name; "otel" for probe/cpu's
// OpenTelemetry engine, "fp" for its frame-pointer sampler), what the
// machine must offer for Start to succeed, for an ErrNotSupported whose
// message does not say which.
var needs = map[string][]check{
	"sched": {privileged, btf, memlock, seccomp},
	"cuda":  {privileged, uprobes, memlock, seccomp},
	"cpu":   {privileged, perfEvents, memlock, seccomp},
	"fp":    {privileged, perfEvents, memlock, seccomp},
	"otel":  {privileged, perfEvents, memlockUnlimited, seccomp},
	"proc":  {procfs},
}

func procfs(Machine) string {
	if _, err := os.ReadFile("/proc/self/stat"); err != nil {
		return "/proc not readable: " + err.Error()
	}
	return ""
}

// notTheMachine are ErrNotSupported messages that are about the target or
// the configuration, never the machine: in a test they mean that the
// test's own workload (which maps the stub libcuda, has a pid) or the
// probe broke.
var notTheMachine = []string{
	"no target pid",
	"mapped by process", // cuda: the workload maps no libcuda
	"cuda: none of",     // cuda: the stub library lacks the symbols
	"no /metrics",       // servermetrics: the test's server
	"scraping turned off",
}

// Verdict says whose doing a probe's ErrNotSupported is.
type Verdict struct {
	// Lacks is what this machine lacks that explains the error. Empty:
	// nothing does, the machine could have run the probe.
	Lacks []string
	// Broke, when set, says why the error is the probe's or its
	// target's and not the machine's.
	Broke string
}

// Judge decides whose doing err, an error wrapping probe.ErrNotSupported
// from the Start of the probe called name, is on this machine.
func Judge(name string, err error) Verdict { return judge(name, err, ReadMachine()) }

func judge(name string, err error, m Machine) Verdict {
	msg := err.Error()
	for _, s := range notTheMachine {
		if strings.Contains(msg, s) {
			return Verdict{Broke: fmt.Sprintf("%q is about the test's target or the probe, not the machine: a regression of the test's own workload or of the probe", s)}
		}
	}
	lower := strings.ToLower(msg)
	var checks []check
	switch {
	case strings.Contains(msg, "BTF"):
		checks = []check{btf}
	case strings.Contains(lower, "memlock") || strings.Contains(lower, "rlimit"):
		if strings.Contains(lower, "unlimited") || name == "otel" {
			checks = []check{memlockUnlimited}
		} else {
			checks = []check{memlock}
		}
	case strings.Contains(msg, "NVML"):
		checks = []check{func(Machine) string { return "no usable NVML (the NVIDIA driver, a GPU)" }}
	case strings.Contains(lower, "kernel version"):
		checks = []check{kernelFeature}
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) ||
		strings.Contains(lower, "operation not permitted") || strings.Contains(lower, "permission denied"):
		checks = []check{privileged, seccomp, memlock}
		if name == "cpu" || name == "fp" || name == "otel" {
			checks = append(checks, perfEvents)
		}
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOSYS):
		checks = []check{perfEvents}
		if name == "cuda" {
			checks = []check{uprobes}
		}
	case errors.Is(err, ebpf.ErrNotSupported):
		checks = []check{kernelFeature}
	default:
		checks = needs[name]
	}
	var v Verdict
	for _, c := range checks {
		if s := c(m); s != "" {
			v.Lacks = append(v.Lacks, s)
		}
	}
	if len(v.Lacks) == 0 {
		v.Broke = "this machine has what the probe needs (" + m.String() + "), so it could have started: the probe is broken"
	}
	return v
}

// String describes m in the terms of the checks.
func (m Machine) String() string {
	p := strconv.Itoa(m.Paranoid)
	if m.Paranoid == -2 {
		p = "none"
	}
	return fmt.Sprintf("euid %d, CapEff %#x, kernel %s, BTF %v, perf_event_paranoid %s, RLIMIT_MEMLOCK %s/%s, seccomp %d, uprobes %v",
		m.EUID, m.CapEff, m.Release, m.BTF, p, mib(m.Memlock.Cur), mib(m.Memlock.Max), m.Seccomp, m.Uprobes)
}

// NotSupported handles err, an error wrapping probe.ErrNotSupported from
// the Start of the probe called name (see needs), in a test: it fails the
// test, here and everywhere, when the machine could have run the probe or
// the error is not about the machine (Judge); otherwise it goes through
// need.Skip, which skips here and fails under CI, naming what the machine
// lacks. what says what the test tried ("eBPF not permitted here").
func NotSupported(tb testing.TB, name, what string, err error) {
	tb.Helper()
	v := Judge(name, err)
	if v.Broke != "" {
		tb.Fatalf("Start: %v: %s", err, v.Broke)
	}
	need.Skip(tb, "%s: %v (this machine: %s)", what, err, strings.Join(v.Lacks, "; "))
}

// EnableStats turns on the kernel's BPF run-time statistics until the test
// ends. Where it may not (no CAP_SYS_ADMIN, a kernel before 5.8) the test
// skips, and fails under CI (need.Skip); where the machine has
// CAP_SYS_ADMIN and a kernel that has them, a refusal fails the test
// everywhere.
func EnableStats(tb testing.TB) {
	tb.Helper()
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err == nil {
		tb.Cleanup(func() { _ = c.Close() })
		return
	}
	m := ReadMachine()
	var lacks []string
	if !m.has(unix.CAP_SYS_ADMIN) {
		lacks = append(lacks, fmt.Sprintf("no CAP_SYS_ADMIN (euid %d, CapEff %#x)", m.EUID, m.CapEff))
	}
	if m.Major < 5 || (m.Major == 5 && m.Minor < 8) {
		lacks = append(lacks, "kernel "+m.Release+" before 5.8 (no BPF_ENABLE_STATS)")
	}
	if s := seccomp(m); s != "" {
		lacks = append(lacks, s)
	}
	if len(lacks) == 0 {
		tb.Fatalf("enabling BPF run-time statistics: %v; this machine could (%s)", err, m)
	}
	need.Skip(tb, "cannot enable BPF run-time statistics: %v (this machine: %s)", err, strings.Join(lacks, "; "))
}
