package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/probe/cpu"
	"github.com/asrprof/asrprof/probe/gpu"
	"github.com/asrprof/asrprof/probe/internal/bpf"
)

// Finding is the outcome of one check.
type Finding struct {
	Name   string
	OK     bool
	Detail string // what was seen; may be empty
	Fix    string // what to do when not OK; may be empty
}

// String formats f as one line: "ok   NAME: DETAIL" or
// "no   NAME: DETAIL — FIX" (": DETAIL" and " — FIX" only when not empty).
func (f Finding) String() string {
	s := "no   "
	if f.OK {
		s = "ok   "
	}
	s += f.Name
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	if f.Fix != "" {
		s += " — " + f.Fix
	}
	return s
}

// Options says what to check besides the machine.
type Options struct {
	// Target is the server's base URL; "" skips the target checks.
	Target string
	// PID is the server's process; 0: find the listener on Target's port.
	PID int
	// Headers go with the target checks ("Name: value", as capture's
	// --header; option.ParseHeader; a bad one is left out).
	Headers []string
	// NVML is the library to ask; nil: the system's.
	NVML nvml.Interface
	// Timeout bounds the NVML and HTTP checks each (3 s when zero).
	Timeout time.Duration
}

// Paths of the kernel interfaces checked.
const (
	BTFPath      = "/sys/kernel/btf/vmlinux"
	ParanoidPath = "/proc/sys/kernel/perf_event_paranoid"
)

// TracefsPaths are where tracefs is looked for, in order.
var TracefsPaths = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// Facts is what Gather saw.
type Facts struct {
	EUID   int
	CapEff uint64
	CapErr error

	BTFErr error // nil: BTFPath exists

	Tracefs string // the path whose events/ exists; "" none

	Paranoid    int
	ParanoidErr error
	PerfOpenErr error // opening a software cpu-clock event on CPU 0

	MemlockCur, MemlockMax uint64 // unix.RLIM_INFINITY: unlimited
	MemlockErr             error
	BPFLoadErr             error
	// BPFStatsErr is what turning on the kernel's BPF run-time statistics
	// (capture --bpf-stats) gave; nil: it worked.
	BPFStatsErr error
	// OTelErr is what starting the cpu probe's otel engine (the
	// OpenTelemetry eBPF profiler) gave; nil: it started and stopped.
	OTelErr error

	GPU    gpu.Info
	GPUErr error

	Target        string // "" when not asked
	HealthURL     string
	HealthStatus  int
	HealthLatency time.Duration
	HealthErr     error
	// ModelsStatus is GET Target/v1/models's status (0: it failed), and
	// ModelIDs the ids its answer lists.
	ModelsStatus int
	ModelIDs     []string

	PIDAsked  bool   // a pid was given or a target's listener looked up
	PID       int    // found (or given and alive)
	PIDSource string // "--pid" or "listener on port N"
	PIDErr    error
	PIDHint   string // where the listener was not found: a process whose command line names the port
	PIDRemote bool   // the target is another machine (RemoteHost)
}

// Check gathers the facts and decides.
func Check(ctx context.Context, opts Options) []Finding {
	return Decide(Gather(ctx, opts))
}

// Gather looks at this machine and the target. It does not fail: what
// went wrong is recorded in Facts.
func Gather(ctx context.Context, opts Options) Facts {
	timeout := cmp.Or(max(opts.Timeout, 0), 3*time.Second)
	var f Facts
	f.EUID = os.Geteuid()
	if b, err := os.ReadFile("/proc/self/status"); err != nil {
		f.CapErr = err
	} else {
		f.CapEff, f.CapErr = ParseCapEff(string(b))
	}
	_, f.BTFErr = os.Stat(BTFPath)
	for _, p := range TracefsPaths {
		if _, err := os.Stat(p + "/events"); err == nil {
			f.Tracefs = p
			break
		}
	}
	if b, err := os.ReadFile(ParanoidPath); err != nil {
		f.ParanoidErr = err
	} else {
		f.Paranoid, f.ParanoidErr = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	f.PerfOpenErr = openPerfEvent()
	// Read the memlock limit before RemoveMemlock changes it.
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		f.MemlockErr = err
	} else {
		f.MemlockCur, f.MemlockMax = rl.Cur, rl.Max
	}
	f.BPFLoadErr = loadBPF()
	if c, err := EnableBPFStats(); err != nil {
		f.BPFStatsErr = err
	} else {
		c.Close()
	}
	// Starting the otel engine at a low rate and stopping it again is the
	// only sure way to know whether the library runs here.
	o := cpu.NewOTel()
	if f.OTelErr = o.Start(ctx, 19); f.OTelErr == nil {
		f.OTelErr = o.Stop()
	}

	nctx, cancel := context.WithTimeout(ctx, timeout)
	f.GPU, f.GPUErr = gpu.Inspect(nctx, opts.NVML)
	cancel()

	if opts.Target != "" {
		f.Target = opts.Target
		f.HealthURL = strings.TrimRight(opts.Target, "/") + "/health"
		hctx, cancel := context.WithTimeout(ctx, timeout)
		h, _ := option.ParseHeader(opts.Headers)
		f.HealthStatus, f.HealthLatency, _, f.HealthErr = get(hctx, f.HealthURL, h)
		var body []byte
		if f.HealthErr == nil {
			var v any
			f.ModelsStatus, _, body, _ = get(hctx, strings.TrimRight(opts.Target, "/")+"/v1/models", h)
			if f.ModelsStatus == http.StatusOK && json.Unmarshal(body, &v) == nil {
				f.ModelIDs = model.Fingerprint{TargetModels: v}.ModelIDs()
			}
		}
		cancel()
	}
	switch {
	case opts.PID > 0:
		f.PIDAsked, f.PIDSource = true, "--pid"
		if _, err := os.Stat("/proc/" + strconv.Itoa(opts.PID)); err != nil {
			f.PIDErr = fmt.Errorf("no process %d", opts.PID)
		} else {
			f.PID = opts.PID
		}
	case opts.Target != "":
		f.PIDAsked = true
		port, err := TargetPort(opts.Target)
		if err != nil {
			f.PIDErr = err
			break
		}
		f.PIDSource = fmt.Sprintf("listener on port %d", port)
		if u, err := url.Parse(opts.Target); err == nil && RemoteHost(u.Hostname()) != "" {
			f.PIDErr, f.PIDRemote = fmt.Errorf("%s is not this machine", u.Hostname()), true
			break
		}
		f.PID, f.PIDErr = proctree.FindListener(port)
		if f.PIDErr != nil {
			f.PIDHint = proctree.PortHint(port)
		}
	}
	return f
}

// RemoteHost is host when it names another machine: an address (or
// every address a name resolves to) that is neither loopback nor one of
// this machine's interfaces; "" where it is this machine, or where a name
// does not resolve (not known to be remote).
func RemoteHost(host string) string {
	if host == "localhost" {
		return ""
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		addrs, err := net.LookupIP(host)
		if err != nil || len(addrs) == 0 {
			return ""
		}
		ips = addrs
	}
	if slices.ContainsFunc(ips, func(ip net.IP) bool { return ip.IsLoopback() || ip.IsUnspecified() || localAddr(ip) }) {
		return ""
	}
	return host
}

// localAddr tells whether ip is an address of one of this machine's
// interfaces (the target as a remote driver names it, seen from the agent
// on the server's host, is this machine).
func localAddr(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	return err == nil && slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(ip)
	})
}

// ParseCapEff returns the CapEff mask from the text of /proc/PID/status.
func ParseCapEff(status string) (uint64, error) {
	v, ok := proctree.StatusField(status, "CapEff")
	if !ok {
		return 0, errors.New("no CapEff line in /proc/self/status")
	}
	m, err := strconv.ParseUint(v, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing CapEff %q: %w", v, err)
	}
	return m, nil
}

// TargetPort returns the TCP port of a target URL (the scheme's default
// when the URL has none).
func TargetPort(target string) (int, error) {
	u, err := url.Parse(target)
	if err != nil {
		return 0, fmt.Errorf("parsing target %q: %w", target, err)
	}
	if p := u.Port(); p != "" {
		return strconv.Atoi(p)
	}
	switch u.Scheme {
	case "http", "ws":
		return 80, nil
	case "https", "wss":
		return 443, nil
	}
	return 0, fmt.Errorf("target %q has no port", target)
}

// openPerfEvent opens and closes a software cpu-clock sampling event on
// CPU 0 for all processes, as a sampling profiler does.
func openPerfEvent() error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: 1_000_000, // period in ns
		Bits:   unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// loadBPF loads (and unloads) a socket filter that returns 0.
func loadBPF() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("removing memlock limit: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "asrprof_doctor",
		Type:         ebpf.SocketFilter,
		License:      "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return err
	}
	return prog.Close()
}

// get does GET url with the headers h and returns the status, the
// latency and the first MiB of the body.
func get(ctx context.Context, u string, h http.Header) (int, time.Duration, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	if h != nil {
		req.Header = h.Clone()
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, time.Since(t0), b, nil
}

func hasCap(mask uint64, c int) bool { return mask&(1<<c) != 0 }

// Decide turns facts into findings, in a fixed order. Target findings
// appear only when a target or pid was asked for; GPM and clock-offset
// findings only when NVML answered.
func Decide(f Facts) []Finding {
	var out []Finding
	add := func(fd Finding) { out = append(out, fd) }

	// Privileges.
	priv := Finding{Name: "root or CAP_BPF+CAP_PERFMON"}
	if f.CapErr != nil {
		priv.Detail = fmt.Sprintf("euid %d; capabilities unknown: %v", f.EUID, f.CapErr)
		priv.OK = f.EUID == 0
	} else {
		var caps []string
		for _, c := range []struct {
			bit  int
			name string
		}{{unix.CAP_BPF, "CAP_BPF"}, {unix.CAP_PERFMON, "CAP_PERFMON"}, {unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}, {unix.CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"}} {
			if hasCap(f.CapEff, c.bit) {
				caps = append(caps, c.name)
			}
		}
		if len(caps) == 0 {
			caps = []string{"none of CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN"}
		}
		priv.Detail = fmt.Sprintf("euid %d; effective: %s", f.EUID, strings.Join(caps, " "))
		priv.OK = (hasCap(f.CapEff, unix.CAP_BPF) && hasCap(f.CapEff, unix.CAP_PERFMON)) || hasCap(f.CapEff, unix.CAP_SYS_ADMIN)
	}
	if !priv.OK {
		priv.Fix = "run as root, or give the binary CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep asrprof); without them the sched, cpu and cuda probes are skipped"
	}
	add(priv)

	btf := Finding{Name: "BTF present (" + BTFPath + ")", OK: f.BTFErr == nil}
	if !btf.OK {
		btf.Detail = errText(f.BTFErr)
		btf.Fix = "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (5.8 or later); the sched probe needs it"
	}
	add(btf)

	tr := Finding{Name: "tracefs mounted", OK: f.Tracefs != ""}
	if tr.OK {
		tr.Name += " (" + f.Tracefs + ")"
	} else {
		tr.Detail = "neither " + strings.Join(TracefsPaths, " nor ") + " has events/"
		tr.Fix = "mount -t tracefs tracefs /sys/kernel/tracing (asrprof's own BTF tracepoints do not need it; the cpu probe's otel engine uses it to notice process exits, and runs without it)"
	}
	add(tr)

	perf := Finding{Name: "perf events (cpu-clock)", OK: f.PerfOpenErr == nil}
	par := "perf_event_paranoid unknown"
	if f.ParanoidErr == nil {
		par = fmt.Sprintf("perf_event_paranoid=%d", f.Paranoid)
	}
	if perf.OK {
		perf.Detail = par + "; a cpu-clock event opened on CPU 0"
	} else {
		perf.Detail = par + "; perf_event_open: " + errText(f.PerfOpenErr)
		perf.Fix = "run as root or with CAP_PERFMON, or lower the limit: sysctl kernel.perf_event_paranoid=-1; the cpu probe needs it"
		if errors.Is(f.PerfOpenErr, unix.ENOENT) || errors.Is(f.PerfOpenErr, unix.ENOSYS) {
			perf.Fix = "this kernel has no perf events (CONFIG_PERF_EVENTS); the cpu probe cannot run"
		}
	}
	add(perf)

	bpf := Finding{Name: "eBPF program load", OK: f.BPFLoadErr == nil}
	if !bpf.OK {
		bpf.Detail = "socket filter: " + errText(f.BPFLoadErr)
		bpf.Fix = "run as root or with CAP_BPF; check kernel.unprivileged_bpf_disabled and any LSM (lockdown) that forbids BPF"
	}
	add(bpf)

	st := Finding{Name: "BPF run-time statistics (--bpf-stats)", OK: f.BPFStatsErr == nil}
	if st.OK {
		st.Detail = "can be turned on: --bpf-stats measures the probes' time inside the kernel"
	} else {
		st.Detail = errText(f.BPFStatsErr)
		st.Fix = "needs CAP_SYS_ADMIN (root); without it --bpf-stats only says so, the capture goes on"
	}
	add(st)

	add(decideMemlock(f))
	add(decideCPUEngine(f))

	nv := Finding{Name: "NVML", OK: f.GPUErr == nil}
	if nv.OK {
		var gpus []string
		for _, d := range f.GPU.Devices {
			gpus = append(gpus, fmt.Sprintf("%d %s", d.Index, d.Name))
		}
		nv.Detail = fmt.Sprintf("driver %s, %d GPU(s): %s", f.GPU.Driver, len(f.GPU.Devices), strings.Join(gpus, ", "))
	} else {
		if nn, ok := errors.AsType[*gpu.NoNVMLError](f.GPUErr); ok {
			nv.Detail = nn.Reason
			nv.Fix = "install the NVIDIA driver (it provides libnvidia-ml.so.1) or run on the GPU host; the gpu probe is skipped"
		} else {
			nv.Detail = errText(f.GPUErr)
			nv.Fix = "check nvidia-smi; the gpu probe is skipped"
		}
	}
	add(nv)
	if nv.OK {
		gp := Finding{Name: "GPM", OK: len(f.GPU.Devices) > 0}
		var yes, no []string
		for _, d := range f.GPU.Devices {
			if d.GPM {
				yes = append(yes, strconv.Itoa(d.Index))
			} else {
				no = append(no, strconv.Itoa(d.Index))
				gp.OK = false
			}
		}
		switch {
		case len(no) == 0:
			gp.Detail = "supported on GPU " + strings.Join(yes, ", ")
		case len(yes) == 0:
			gp.Detail = "not supported"
		default:
			gp.Detail = "supported on GPU " + strings.Join(yes, ", ") + "; not on " + strings.Join(no, ", ")
		}
		if !gp.OK {
			gp.Fix = "GPM needs a Hopper or newer GPU and driver; without it SM activity, occupancy and tensor activity are not recorded (utilization, power and memory are)"
		}
		add(gp)
		add(decideOffset(f.GPU))
	}

	if f.Target != "" {
		tg := Finding{Name: "target reachable"}
		switch {
		case f.HealthErr != nil:
			tg.Detail = "GET " + f.HealthURL + ": " + errText(f.HealthErr)
			tg.Fix = "start the server or fix --target"
			if ne, ok := errors.AsType[net.Error](f.HealthErr); ok && ne.Timeout() {
				tg.Fix = "the server did not answer in time: is it busy loading the model, or is --target the right host?"
			}
		default:
			tg.OK = f.HealthStatus < 500
			tg.Detail = fmt.Sprintf("GET %s → %d in %s", f.HealthURL, f.HealthStatus, f.HealthLatency.Round(time.Millisecond))
			if f.HealthStatus >= 300 && tg.OK {
				tg.Detail += " (answers, but has no healthy /health)"
			}
			if !tg.OK {
				tg.Fix = "the server answers with an error: check its log"
			}
		}
		add(tg)
		if f.HealthErr == nil {
			add(decideModels(f))
		}
	}
	if f.PIDAsked {
		pf := Finding{Name: "target pid", OK: f.PIDErr == nil && f.PID > 0}
		if pf.OK {
			pf.Detail = fmt.Sprintf("%d (%s)", f.PID, f.PIDSource)
		} else {
			pf.Detail = errText(f.PIDErr)
			if f.PIDSource == "--pid" { // FindListener's errors name the port
				pf.Detail = f.PIDSource + ": " + pf.Detail
			}
			pf.Fix = "pass --pid, or run asrprof on the server's host as root (finding a listener reads other users' /proc/PID/fd); the probes that need a process are skipped"
			if f.PIDRemote {
				pf.Fix = "the host probes and the gpu probe watch this machine: run asrprof on the server's host, or give capture --agent URL of an asrprof serve there (docs/SCALE.md)"
			}
			if f.PIDHint != "" {
				pf.Fix += "; " + f.PIDHint
			}
		}
		add(pf)
	}
	return out
}

// decideMemlock judges the memlock rlimit. asrprof's own eBPF programs do
// not need it (the kernel, 5.11 or later, charges BPF memory to the
// cgroup and cilium/ebpf's RemoveMemlock knows that), but the OpenTelemetry
// eBPF profiler (the cpu probe's otel engine, for Python-aware stacks)
// raises it to unlimited at start and refuses to run when
// it cannot.
func decideMemlock(f Facts) Finding {
	fd := Finding{Name: "memlock rlimit"}
	if f.MemlockErr != nil {
		fd.Detail = errText(f.MemlockErr)
		return fd
	}
	fd.Detail = fmt.Sprintf("soft %s, hard %s", limitText(f.MemlockCur), limitText(f.MemlockMax))
	fd.OK = f.MemlockMax == unix.RLIM_INFINITY || hasCap(f.CapEff, unix.CAP_SYS_RESOURCE)
	if !fd.OK {
		fd.Fix = "asrprof's own eBPF probes (cpu, sched, cuda) load anyway, since BPF memory is charged to the cgroup; only the cpu probe's otel engine needs 'ulimit -l unlimited' or CAP_SYS_RESOURCE (see the cpu probe engine line)"
	}
	return fd
}

// MaxClockOffset is the largest |NVML − system| clock offset taken as fine.
const MaxClockOffset = 50 * time.Millisecond

func decideOffset(info gpu.Info) Finding {
	fd := Finding{Name: "clock offset (NVML − system)"}
	if !info.ClockOffsetOK {
		fd.Detail = "not measured: no power sample"
		fd.Fix = "NVML gave no power samples; GPU samples are joined assuming no offset"
		return fd
	}
	d := time.Duration(info.ClockOffsetNs)
	fd.Detail = fmt.Sprintf("%.1f ms (lower bound, within the ~20 ms power-sample cadence)", float64(d)/1e6)
	fd.OK = d.Abs() <= MaxClockOffset
	if !fd.OK {
		fd.Fix = "NVML's timestamps disagree with the system clock; the capture records the offset in the manifest: add it when joining GPU samples with other records"
	}
	return fd
}

func limitText(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	if v >= 1<<20 && v%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", v>>20)
	}
	if v >= 1<<10 && v%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", v>>10)
	}
	return fmt.Sprintf("%d B", v)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// decideCPUEngine says which engine the cpu probe's auto mode will use.
func decideCPUEngine(f Facts) Finding {
	fd := Finding{Name: "cpu probe engine", OK: f.OTelErr == nil}
	if fd.OK {
		fd.Detail = "otel (OpenTelemetry eBPF profiler) starts here: Python frames named with file and line"
		return fd
	}
	if f.BPFLoadErr != nil && f.PerfOpenErr == nil {
		fd.Detail = "perf (perf events, unprivileged: the user's own server's user-space stacks); eBPF cannot load: " + errText(f.BPFLoadErr)
		fd.Fix = "for kernel frames and Python frames, run asrprof as root (or with CAP_BPF+CAP_PERFMON)"
		return fd
	}
	fd.Detail = "fp (frame-pointer sampler); the otel engine cannot start: " + errText(f.OTelErr)
	fd.Fix = "for Python frames, raise the memlock limit ('ulimit -l unlimited' in the shell that runs asrprof, or CAP_SYS_RESOURCE), " +
		"or start a CPython >= 3.12 server with PYTHONPERFSUPPORT=1 for the fp engine to name its functions"
	return fd
}

// EnableBPFStats turns on the kernel's BPF run-time statistics (the
// run_time_ns of every program; the kernel then times each run, tens of
// nanoseconds more a run) until the returned closer is closed (capture
// --bpf-stats). It needs CAP_SYS_ADMIN; without it the error wraps
// probe.ErrNotSupported.
func EnableBPFStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, bpf.NotSupported(fmt.Errorf("enabling BPF run-time statistics: %w", err))
	}
	return c, nil
}

// decideModels says what GET /v1/models means for capture's requests:
// the model they name without --model, or the API key they need.
func decideModels(f Facts) Finding {
	m := Finding{Name: "target models", OK: true}
	switch n := len(f.ModelIDs); {
	case f.ModelsStatus == http.StatusUnauthorized || f.ModelsStatus == http.StatusForbidden:
		m.OK = false
		m.Detail = fmt.Sprintf("GET /v1/models → %d: the server wants an API key", f.ModelsStatus)
		m.Fix = `give capture (and doctor) --header "Authorization: Bearer KEY" (vLLM's and SGLang's --api-key)`
	case n == 1:
		m.Detail = fmt.Sprintf("/v1/models lists %s: capture's requests name it unless --model names another", f.ModelIDs[0])
	case n > 1:
		m.Detail = fmt.Sprintf("/v1/models lists %d (%s): capture's requests name none unless --model picks one", n, strings.Join(f.ModelIDs, ", "))
	case f.ModelsStatus == http.StatusOK:
		m.Detail = "/v1/models lists no model: capture's requests name none unless --model"
	default:
		m.Detail = fmt.Sprintf("GET /v1/models → %d: capture's requests name no model unless --model", f.ModelsStatus)
	}
	return m
}
