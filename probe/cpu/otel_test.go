package cpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/ebpf-profiler/libpf"
	"go.opentelemetry.io/ebpf-profiler/reporter/samples"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

// MaxLag returns the longest time a sample of a watched process took
// from being taken to being reported.
func (o *OTel) MaxLag() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxLag
}

// Dropped returns how many samples of processes outside the watched set
// the library reported since the last Reset (the library samples every
// process).
func (o *OTel) Dropped() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}

// TestOTelReporter feeds the engine's reporter the kinds of frames the
// library produces (kernel, native as file + ELF address, Python) and
// checks what Collect and BuildProfile make of them. It needs no BPF.
func TestOTelReporter(t *testing.T) {
	o := NewOTel()
	self := os.Getpid()
	if err := o.Watch([]int{self}); err != nil {
		t.Fatal(err)
	}
	o.sym = newSymbolizer()
	o.sym.refreshMaps(self)
	o.settle = 50 * time.Millisecond

	// A native frame of this test binary, given as the library gives it:
	// the file's base name, the mapping's file offset and the ELF virtual
	// address (this binary is not position-independent, so the runtime
	// address is the ELF one).
	exe, _ := os.Executable()
	pc := uint64(reflect.ValueOf(symbolizeMe).Pointer())
	var off uint64
	var found bool
	for _, m := range o.sym.maps[self] {
		if m.Path == exe && pc >= m.Start && pc < m.Limit {
			off, found = m.Offset, true
		}
	}
	if !found {
		t.Fatalf("no mapping of %s covers %#x", exe, pc)
	}
	mapping := libpf.NewFrameMapping(libpf.FrameMappingData{
		File:       libpf.NewFrameMappingFile(libpf.FrameMappingFileData{FileName: libpf.Intern(filepath.Base(exe))}),
		FileOffset: off,
	})
	var fs libpf.Frames
	for _, f := range []libpf.Frame{
		{Type: libpf.KernelFrame, FunctionName: libpf.Intern("do_syscall_64")},
		{Type: libpf.NativeFrame, Mapping: mapping, AddressOrLineno: libpf.AddressOrLineno(pc + 1)},
		{Type: libpf.PythonFrame, FunctionName: libpf.Intern("Decoder.step"), SourceFile: libpf.Intern("/srv/asr/decoder.py"), SourceLine: 42},
		{Type: libpf.PythonFrame, FunctionName: libpf.Intern("<module>"), SourceFile: libpf.Intern("/srv/asr/main.py"), SourceLine: 7},
	} {
		fs.Append(&f)
	}
	cpuType := &samples.TypeMetadata{PeriodType: "cpu", SampleType: "samples"}
	now := time.Now()
	report := func(pid int, typ *samples.TypeMetadata, at time.Time) {
		meta := &samples.TraceEventMeta{PID: libpf.PID(pid), TID: libpf.PID(pid + 1), Comm: libpf.Comm{},
			ProfileType: typ, Timestamp: libpf.UnixTime64(at.UnixNano())}
		if err := o.ReportTraceEvent(&libpf.Trace{Frames: fs}, meta); err != nil {
			t.Fatal(err)
		}
	}
	report(self, cpuType, now)
	report(self, cpuType, now)
	report(self, nil, now)
	report(self, &samples.TypeMetadata{SampleType: "off_cpu"}, now) // not an on-CPU sample
	report(1, cpuType, now)                                         // not watched
	report(self, cpuType, now.Add(-time.Hour))                      // taken before the period
	report(self, cpuType, now.Add(time.Second))                     // taken after it: the next period's
	if o.Dropped() != 1 {
		t.Errorf("dropped %d samples, want the 1 of pid 1", o.Dropped())
	}
	stacks, err := o.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(stacks) != 1 || stacks[0].Count != 3 || stacks[0].PID != self || stacks[0].TID != self+1 {
		t.Fatalf("stacks %+v, want one of pid %d with 3 samples", stacks, self)
	}
	got := stacks[0].Frames
	want := []struct{ fn, file, src string }{
		{"do_syscall_64", KernelFile, ""},
		{runtime.FuncForPC(uintptr(pc)).Name(), exe, ""},
		{"Decoder.step", PythonFile, "/srv/asr/decoder.py"},
		{"<module>", PythonFile, "/srv/asr/main.py"},
	}
	if len(got) != len(want) {
		t.Fatalf("frames %+v", got)
	}
	for i, w := range want {
		if got[i].Func != w.fn || got[i].File != w.file || got[i].Source != w.src {
			t.Errorf("frame %d = %+v, want %s in %s (%s)", i, got[i], w.fn, w.file, w.src)
		}
	}
	if got[2].Line != 42 {
		t.Errorf("python frame line %d, want 42", got[2].Line)
	}
	// The sample taken "after" the first Collect waits for the second,
	// which returns once the library has reported past its own end.
	time.Sleep(time.Until(now.Add(1100 * time.Millisecond)))
	again, _ := o.Collect(context.Background())
	if len(again) != 1 || again[0].Count != 1 {
		t.Errorf("second Collect: %+v, want the 1 later sample", again)
	}
	if again, _ := o.Collect(context.Background()); len(again) != 0 {
		t.Errorf("a third Collect returned %d stacks, want none", len(again))
	}
	// A tracer that died is reported, not hidden behind empty profiles.
	o.mu.Lock()
	o.died = true
	o.mu.Unlock()
	if _, err := o.Collect(context.Background()); err == nil || !strings.Contains(err.Error(), "samples since then are missing") {
		t.Errorf("Collect after the tracer died: %v", err)
	}

	// In the profile the Python frames carry file and line.
	prof := roundTrip(t, BuildProfile(stacks, probe.Period{Level: "c1", Repeat: 1}, 99, time.Now(), time.Now()))
	var line int64
	var file string
	for _, l := range prof.Location {
		for _, ln := range l.Line {
			if ln.Function.Name == "Decoder.step" {
				line, file = ln.Line, ln.Function.Filename
			}
		}
	}
	if line != 42 || file != "/srv/asr/decoder.py" {
		t.Errorf("profile: Decoder.step at %s:%d, want /srv/asr/decoder.py:42", file, line)
	}
	if m := prof.Mapping[0]; strings.HasPrefix(m.File, "[") {
		t.Errorf("first mapping %q, want the binary's", m.File)
	}
}

// TestOTelPythonFrames samples a Python process with the OpenTelemetry
// eBPF profiler and looks for its hot Python function by name, file and
// line. Where the library may not start (the 8 MiB hard memlock limit of
// the CI and dev machines) it skips, saying that it runs on the H200
// (make test-gpu, which sets ASRPROF_DEVICE=1: there it fails instead).
func TestOTelPythonFrames(t *testing.T) {
	cmd, script := startHotPython(t)
	o := startOTel(t)
	defer o.Stop()
	samplePython(t, o, cmd.Process.Pid, script)
}

// TestOTelRestart starts the engine a second time in the same process, as
// a runbook's successive captures do.
func TestOTelRestart(t *testing.T) {
	cmd, script := startHotPython(t)
	for i := 1; i <= 2; i++ {
		o := startOTel(t)
		samplePython(t, o, cmd.Process.Pid, script)
		if err := o.Stop(); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
}

// startHotPython runs a Python process that spends its time in
// asrprof_hot_loop, and returns it and its script's path.
func startHotPython(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	return startHotPythonArgs(t)
}

// startHotPythonArgs is startHotPython with interpreter options.
func startHotPythonArgs(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	need.Root(t, "to load BPF programs and open perf events")
	py := need.Binary(t, "python3")
	script := filepath.Join(t.TempDir(), "hot.py")
	src := "import time\n" +
		"def asrprof_hot_loop(n):\n" +
		"    s = 0\n" +
		"    for i in range(n):\n" +
		"        s += i * i\n" +
		"    return s\n" +
		"end = time.time() + 60\n" +
		"while time.time() < end:\n" +
		"    asrprof_hot_loop(100000)\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, append(args, script)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, script
}

// startOTel starts the engine at 99 Hz. Where this machine does not allow
// the library to start (probetest.Judge finds what it lacks: here the
// memlock limit) the test runs on the H200 only (need.Device); a refusal
// on a machine that lacks nothing the library needs fails everywhere.
func startOTel(t *testing.T) *OTel {
	t.Helper()
	o := NewOTel()
	if err := o.Start(context.Background(), 99); err != nil {
		if errors.Is(err, probe.ErrNotSupported) {
			v := probetest.Judge("otel", err)
			if v.Broke != "" {
				t.Fatalf("the OpenTelemetry eBPF profiler did not start: %v: %s", err, v.Broke)
			}
			need.Device(t, fmt.Sprintf("the OpenTelemetry eBPF profiler cannot start: %v; this machine: %s", err, strings.Join(v.Lacks, "; ")))
		}
		t.Fatal(err)
	}
	return o
}

// samplePython watches pid and waits (up to 20 s) for samples that name
// asrprof_hot_loop with its source file.
func samplePython(t *testing.T, o *OTel, pid int, script string) {
	t.Helper()
	if err := o.Watch([]int{pid}); err != nil {
		t.Fatal(err)
	}
	// The library learns the process's interpreter in the background;
	// give it a few seconds, then count.
	var stacks []Stack
	var hot, total uint64
	var where string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && hot == 0; {
		time.Sleep(2 * time.Second)
		var err error
		stacks, err = o.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stacks {
			total += st.Count
			for _, f := range st.Frames {
				if f.Func == "asrprof_hot_loop" {
					hot += st.Count
					where = f.Source
					break
				}
			}
		}
	}
	t.Logf("%d samples of the Python process, %d in asrprof_hot_loop (%s); %d samples of other processes dropped; reported up to %v after being taken",
		total, hot, where, o.Dropped(), o.MaxLag().Round(time.Millisecond))
	if hot == 0 {
		t.Fatalf("no sample names asrprof_hot_loop; stacks: %+v", stacks)
	}
	if where != script {
		t.Errorf("asrprof_hot_loop's source %q, want %q", where, script)
	}
}

// TestAutoEngine checks that auto runs one engine and says which: OTel
// where it may start, else the frame-pointer sampler with the reason.
func TestAutoEngine(t *testing.T) {
	need.Root(t, "to load BPF programs and open perf events")
	p := New(Config{})
	probetest.Start(t, p, probe.Target{PID: os.Getpid()}, &probetest.Sink{Dir: t.TempDir()}, "eBPF sampling not permitted here")
	d := p.Detail()
	t.Log(d)
	switch {
	case strings.HasPrefix(d, "engine otel"):
		if _, ok := p.eng.(*OTel); !ok {
			t.Errorf("detail %q but engine %T", d, p.eng)
		}
	case strings.HasPrefix(d, "engine fp") && strings.Contains(d, "otel engine "):
		if _, ok := p.eng.(*Sampler); !ok {
			t.Errorf("detail %q but engine %T", d, p.eng)
		}
	default:
		t.Errorf("detail %q: want engine otel, or engine fp with the reason", d)
	}
	if need.OnDevice() && !strings.HasPrefix(d, "engine otel") {
		t.Errorf("%s=1 (the GPU host, under ulimit -l unlimited): auto picked %q, want engine otel", need.DeviceEnv, d)
	}
	if err := New(Config{Engine: "bogus"}).Start(context.Background(), probe.Target{PID: os.Getpid()}, &probetest.Sink{}); err == nil || !strings.Contains(err.Error(), `unknown engine "bogus"`) {
		t.Errorf("unknown engine: %v", err)
	}
}
