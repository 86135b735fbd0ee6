package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/probe/gpu"
)

func TestFindingString(t *testing.T) {
	for _, tt := range []struct {
		f    Finding
		want string
	}{
		{Finding{Name: "BTF present (/sys/kernel/btf/vmlinux)", OK: true}, "ok   BTF present (/sys/kernel/btf/vmlinux)"},
		{Finding{Name: "NVML", Detail: "library not found", Fix: "install the NVIDIA driver"}, "no   NVML: library not found — install the NVIDIA driver"},
		{Finding{Name: "GPM", OK: true, Detail: "supported on GPU 0"}, "ok   GPM: supported on GPU 0"},
	} {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestParseCapEff(t *testing.T) {
	status := "Name:\tasrprof\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n"
	m, err := ParseCapEff(status)
	if err != nil || m != 0x1ffffffffff {
		t.Fatalf("ParseCapEff = %x, %v", m, err)
	}
	if _, err := ParseCapEff("Name:\tx\n"); err == nil {
		t.Error("no CapEff line: no error")
	}
	if _, err := ParseCapEff("CapEff:\tzz\n"); err == nil {
		t.Error("bad CapEff: no error")
	}
}

func TestTargetPort(t *testing.T) {
	for in, want := range map[string]int{
		"http://127.0.0.1:8000": 8000, "http://gpu-host": 80, "https://x/v1": 443, "ws://h:10095": 10095,
	} {
		if got, err := TargetPort(in); err != nil || got != want {
			t.Errorf("TargetPort(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := TargetPort("localhost"); err == nil {
		t.Error("URL without scheme or port: no error")
	}
}

// healthy is what a root process on a good GPU host sees.
func healthy() Facts {
	return Facts{
		EUID: 0, CapEff: 0x1ffffffffff, Tracefs: "/sys/kernel/tracing",
		Paranoid: 2, MemlockCur: unix.RLIM_INFINITY, MemlockMax: unix.RLIM_INFINITY,
		GPU: gpu.Info{Driver: "580.159.04", Devices: []gpu.DeviceInfo{{Index: 0, Name: "NVIDIA H200", GPM: true}},
			ClockOffsetNs: -800_000, ClockOffsetOK: true},
	}
}

func find(fs []Finding, prefix string) (Finding, bool) {
	for _, f := range fs {
		if strings.HasPrefix(f.Name, prefix) {
			return f, true
		}
	}
	return Finding{}, false
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(f *Facts)
		check  string // finding name prefix
		ok     bool
		detail string // substring of Detail
		fix    string // substring of Fix
		absent []string
	}{
		{name: "root", check: "root or CAP_BPF", ok: true, detail: "CAP_BPF CAP_PERFMON"},
		{name: "caps without root", edit: func(f *Facts) { f.EUID = 1000; f.CapEff = 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON },
			check: "root or CAP_BPF", ok: true, detail: "euid 1000"},
		{name: "unprivileged", edit: func(f *Facts) { f.EUID = 1000; f.CapEff = 0 },
			check: "root or CAP_BPF", ok: false, fix: "setcap"},
		{name: "no BTF", edit: func(f *Facts) { f.BTFErr = os.ErrNotExist },
			check: "BTF present", ok: false, fix: "CONFIG_DEBUG_INFO_BTF"},
		{name: "no tracefs", edit: func(f *Facts) { f.Tracefs = "" }, check: "tracefs mounted", ok: false, fix: "mount -t tracefs"},
		{name: "perf ok", check: "perf events", ok: true, detail: "perf_event_paranoid=2"},
		{name: "perf refused", edit: func(f *Facts) { f.Paranoid = 3; f.PerfOpenErr = unix.EACCES },
			check: "perf events", ok: false, detail: "perf_event_paranoid=3", fix: "perf_event_paranoid=-1"},
		{name: "bpf refused", edit: func(f *Facts) { f.BPFLoadErr = unix.EPERM }, check: "eBPF program load", ok: false, fix: "CAP_BPF"},
		{name: "bpf stats", check: "BPF run-time statistics", ok: true, detail: "--bpf-stats measures"},
		{name: "bpf stats refused", edit: func(f *Facts) { f.BPFStatsErr = unix.EPERM }, check: "BPF run-time statistics", ok: false, fix: "CAP_SYS_ADMIN"},
		{name: "memlock unlimited", check: "memlock rlimit", ok: true, detail: "soft unlimited, hard unlimited"},
		{name: "memlock 8 MiB (this sandbox)", edit: func(f *Facts) { f.MemlockCur, f.MemlockMax = 8<<20, 8<<20; f.CapEff &^= 1 << unix.CAP_SYS_RESOURCE },
			check: "memlock rlimit", ok: false, detail: "soft 8 MiB, hard 8 MiB", fix: "otel engine"},
		{name: "memlock low but CAP_SYS_RESOURCE", edit: func(f *Facts) { f.MemlockCur, f.MemlockMax = 64<<10, 64<<10 },
			check: "memlock rlimit", ok: true, detail: "64 KiB"},
		{name: "otel engine starts", check: "cpu probe engine", ok: true, detail: "otel"},
		{name: "otel engine refused", edit: func(f *Facts) { f.OTelErr = errors.New("it raises the memlock limit") },
			check: "cpu probe engine", ok: false, detail: "fp (frame-pointer sampler); the otel engine cannot start: it raises the memlock limit", fix: "ulimit -l unlimited"},
		{name: "NVML", check: "NVML", ok: true, detail: "driver 580.159.04, 1 GPU(s): 0 NVIDIA H200"},
		{name: "no NVML", edit: func(f *Facts) {
			f.GPUErr = &gpu.NoNVMLError{Reason: "library not found (libnvidia-ml.so.1)", Code: nvml.ERROR_LIBRARY_NOT_FOUND}
		}, check: "NVML", ok: false, detail: "library not found", fix: "install the NVIDIA driver",
			absent: []string{"GPM", "clock offset"}},
		{name: "GPM", check: "GPM", ok: true, detail: "supported on GPU 0"},
		{name: "no GPM", edit: func(f *Facts) { f.GPU.Devices[0].GPM = false }, check: "GPM", ok: false, fix: "Hopper"},
		{name: "clock offset fine", check: "clock offset", ok: true, detail: "-0.8 ms"},
		{name: "clock offset large", edit: func(f *Facts) { f.GPU.ClockOffsetNs = 2e9 }, check: "clock offset", ok: false, detail: "2000.0 ms"},
		{name: "clock offset unmeasured", edit: func(f *Facts) { f.GPU.ClockOffsetOK = false }, check: "clock offset", ok: false},
		{name: "no target asked", check: "root", ok: true, absent: []string{"target reachable", "target pid"}},
		{name: "target answers", edit: func(f *Facts) {
			f.Target, f.HealthURL, f.HealthStatus = "http://h:8000", "http://h:8000/health", 200
			f.PIDAsked, f.PID, f.PIDSource = true, 42, "listener on port 8000"
		}, check: "target reachable", ok: true, detail: "→ 200"},
		{name: "target down", edit: func(f *Facts) {
			f.Target, f.HealthURL, f.HealthErr = "http://h:8000", "http://h:8000/health", errors.New("connection refused")
		}, check: "target reachable", ok: false, detail: "connection refused", fix: "start the server"},
		{name: "target 503", edit: func(f *Facts) { f.Target, f.HealthStatus = "http://h:8000", 503 },
			check: "target reachable", ok: false, fix: "log"},
		{name: "pid found", edit: func(f *Facts) { f.PIDAsked, f.PID, f.PIDSource = true, 42, "listener on port 8000" },
			check: "target pid", ok: true, detail: "42 (listener on port 8000)"},
		{name: "pid not found", edit: func(f *Facts) {
			f.PIDAsked, f.PIDSource, f.PIDErr = true, "listener on port 8000", errors.New("port 8000: no listener found")
		}, check: "target pid", ok: false, detail: "port 8000: no listener found", fix: "--pid"},
		{name: "pid hinted", edit: func(f *Facts) {
			f.PIDAsked, f.PIDSource, f.PIDErr = true, "listener on port 8000", errors.New("port 8000: no listener found")
			f.PIDHint = "the command line of pid 7 names the port: vllm serve --port 8000"
		}, check: "target pid", ok: false, fix: "--pid, or run asrprof on the server's host as root (finding a listener reads other users' /proc/PID/fd); the probes that need a process are skipped; the command line of pid 7 names the port: vllm serve --port 8000"},
		{name: "pid gone", edit: func(f *Facts) { f.PIDAsked, f.PIDSource, f.PIDErr = true, "--pid", errors.New("no process 42") },
			check: "target pid", ok: false, detail: "--pid: no process 42", fix: "--pid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthy()
			if tt.edit != nil {
				tt.edit(&f)
			}
			fs := Decide(f)
			got, ok := find(fs, tt.check)
			if !ok {
				t.Fatalf("no %q finding in %+v", tt.check, fs)
			}
			if got.OK != tt.ok || !strings.Contains(got.Detail, tt.detail) || !strings.Contains(got.Fix, tt.fix) {
				t.Errorf("%+v; want OK=%v, detail ∋ %q, fix ∋ %q", got, tt.ok, tt.detail, tt.fix)
			}
			if got.OK && got.Fix != "" {
				t.Errorf("OK finding with a fix: %+v", got)
			}
			if !got.OK && got.Fix == "" && tt.check != "clock offset" {
				t.Errorf("failed finding without a fix: %+v", got)
			}
			for _, a := range tt.absent {
				if f, ok := find(fs, a); ok {
					t.Errorf("finding %+v present, want none", f)
				}
			}
		})
	}
	// A healthy machine: everything OK.
	for _, f := range Decide(healthy()) {
		if !f.OK {
			t.Errorf("healthy facts gave %+v", f)
		}
	}
}

// TestCheckHere runs the real checks on this machine with a local target
// that this process serves, so the listener lookup must find us.
func TestCheckHere(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	fs := Check(context.Background(), Options{Target: srv.URL})
	for _, f := range fs {
		t.Logf("%v %s: %s | %s", f.OK, f.Name, f.Detail, f.Fix)
	}
	tg, ok := find(fs, "target reachable")
	if !ok || !tg.OK {
		t.Errorf("target reachable: %+v", tg)
	}
	// NVML works where the NVIDIA driver's control device exists (checked
	// here without NVML): on the H200 (make test-gpu), not on the CPU
	// machines.
	_, devErr := os.Stat("/dev/nvidiactl")
	if nv, _ := find(fs, "NVML"); nv.OK != (devErr == nil) {
		t.Errorf("NVML finding %+v, but /dev/nvidiactl: %v", nv, devErr)
	}
	var st unix.Stat_t
	if err := unix.Stat("/sys/kernel/btf/vmlinux", &st); err == nil {
		if b, _ := find(fs, "BTF present"); !b.OK {
			t.Errorf("BTF exists but %+v", b)
		}
	}
	if os.Geteuid() != 0 {
		return // the listener lookup needs root for other users' sockets; ours is ours anyway
	}
	pid, _ := find(fs, "target pid")
	if !pid.OK || !strings.HasPrefix(pid.Detail, fmt.Sprint(os.Getpid())) {
		t.Errorf("target pid %+v, want this process %d", pid, os.Getpid())
	}
	if bpf, _ := find(fs, "eBPF program load"); !bpf.OK {
		t.Errorf("root but %+v", bpf)
	}
}

// RemoteHost: loopback, this machine's own name and addresses, and names
// that do not resolve are not known to be remote; another address is.
func TestRemoteHost(t *testing.T) {
	self, _ := os.Hostname()
	for host, want := range map[string]string{"127.0.0.1": "", "localhost": "", "::1": "", "0.0.0.0": "",
		"198.51.100.7": "198.51.100.7", "no-such-host.invalid": "", self: ""} {
		if got := RemoteHost(host); got != want {
			t.Errorf("RemoteHost(%q) = %q, want %q", host, got, want)
		}
	}
}
