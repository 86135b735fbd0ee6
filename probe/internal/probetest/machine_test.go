package probetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/probe"
)

// A root machine with everything the probes need, but the 8 MiB hard
// memlock limit of this sandbox.
var able = Machine{EUID: 0, CapEff: 0x1fffeffffff, BTF: true, Paranoid: 2,
	Memlock: unix.Rlimit{Cur: 8 << 20, Max: 8 << 20}, Release: "6.18.0", Major: 6, Minor: 18, Uprobes: true}

func TestJudge(t *testing.T) {
	user := able
	user.EUID, user.CapEff = 1000, 0
	noBTF := able
	noBTF.BTF = false
	old := able
	old.Release, old.Major, old.Minor = "5.10.0", 5, 10
	noCaps := able // root under setpriv --bounding-set -sys_admin,-bpf,-perfmon
	noCaps.CapEff = 0x13ffedfffff
	unlimited := able
	unlimited.Memlock = unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	ns := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, probe.ErrNotSupported)...)
	}
	eperm := fmt.Errorf("sched: loading BPF programs: %w: %w", probe.ErrNotSupported, unix.EPERM)
	otelMemlock := fmt.Errorf("it raises the memlock limit to unlimited at start, and this process may not (operation not permitted): %w", probe.ErrNotSupported)
	for _, c := range []struct {
		name  string
		probe string
		err   error
		m     Machine
		lacks string // "" : the verdict is Broke
	}{
		{"no libcuda mapped is the workload's fault", "cuda", ns("cuda: no libcuda.so* mapped by process 42 or its descendants"), user, ""},
		{"no symbols in the stub", "cuda", ns("cuda: none of [cuLaunchKernel] found in [/tmp/libcuda.so.1]"), able, ""},
		{"no pid", "sched", ns("sched: no target pid"), noBTF, ""},
		{"BTF missing where there is BTF", "sched", ns("sched: kernel BTF (no such file)"), able, ""},
		{"BTF missing where there is none", "sched", ns("sched: kernel BTF (no such file)"), noBTF, "no kernel BTF"},
		{"EPERM as root", "sched", eperm, able, ""},
		{"EPERM as a user", "sched", eperm, user, "no CAP_SYS_ADMIN"},
		{"EPERM as a user with paranoid 2", "cpu", eperm, user, "perf_event_paranoid 2"},
		{"otel memlock under a limit", "otel", otelMemlock, able, "RLIMIT_MEMLOCK 8192 KiB (hard)"},
		{"otel memlock where unlimited", "otel", otelMemlock, unlimited, ""},
		{"cilium memlock on 6.18", "cuda", ns("cuda: memlock: failed"), able, ""},
		{"cilium memlock on 5.10", "cuda", ns("cuda: memlock: failed"), old, "RLIMIT_MEMLOCK"},
		{"cilium memlock on 6.18 without CAP_BPF", "sched", ns("sched: memlock: failed to set memlock rlimit: operation not permitted"), noCaps, "RLIMIT_MEMLOCK 8192 KiB (hard) and no CAP_SYS_RESOURCE to raise it to unlimited; no CAP_SYS_ADMIN"},
		{"unexplained, able machine", "sched", ns("sched: something"), able, ""},
		{"unexplained, user", "sched", ns("sched: something"), user, "no CAP_SYS_ADMIN"},
		{"metrics never the machine", "metrics", ns("metrics: scraping turned off"), user, ""},
		{"unknown probe", "metrics", ns("metrics: odd"), user, ""},
	} {
		v := judge(c.probe, c.err, c.m)
		switch {
		case c.lacks == "" && v.Broke == "":
			t.Errorf("%s: verdict %+v, want broke", c.name, v)
		case c.lacks != "" && (v.Broke != "" || !strings.Contains(strings.Join(v.Lacks, "; "), c.lacks)):
			t.Errorf("%s: verdict %+v, want lacks %q", c.name, v, c.lacks)
		}
	}
	if !errors.Is(eperm, unix.EPERM) {
		t.Fatal("eperm does not wrap EPERM")
	}
}

// On this machine, whatever it is, a fabricated "no target pid" is always
// a failure and ReadMachine reads something.
func TestReadMachine(t *testing.T) {
	m := ReadMachine()
	t.Logf("this machine: %s", m)
	if m.Release == "" {
		t.Error("no kernel release")
	}
	if v := Judge("sched", fmt.Errorf("sched: no target pid: %w", probe.ErrNotSupported)); v.Broke == "" {
		t.Errorf("no target pid: %+v", v)
	}
}
