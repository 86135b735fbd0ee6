package cpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestPerfMap(t *testing.T) {
	m := readPerfMap(strings.NewReader("7f0000001000 40 py::Decoder.step:/srv/asr/decoder.py\n" +
		"not a line\n" +
		"7f0000002000 20 LazyCompile:*render node.js\n" +
		"7f0000003000 0 empty\n"))
	if m == nil || len(m.syms) != 2 {
		t.Fatalf("perf map %+v, want 2 entries", m)
	}
	fr, ok := perfFrame(m, 0x7f0000001010, 0x7f000000100f)
	if !ok || fr.Func != "Decoder.step" || fr.Source != "/srv/asr/decoder.py" || fr.File != PythonFile {
		t.Errorf("trampoline frame %+v", fr)
	}
	if fr, ok := perfFrame(m, 0x7f0000002004, 0x7f0000002004); !ok || fr.Func != "LazyCompile:*render node.js" || fr.File != "[perf-map]" {
		t.Errorf("other entry %+v", fr)
	}
	if _, ok := perfFrame(m, 0x7f0000001040, 0x7f0000001040); ok {
		t.Error("an address past the entry's size was named")
	}
}

// TestSymbolizePerfMap names an address of an anonymous executable
// mapping of this process through a perf map written for it.
func TestSymbolizePerfMap(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		need.Skip(t, "cannot map executable memory here: %v", err)
	}
	defer unix.Munmap(mem)
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	self := os.Getpid()
	path := perfMapPath(self)
	if _, err := os.Stat(path); err == nil {
		t.Skipf("%s exists already", path)
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%x 100 py::hot_loop:/srv/hot.py\n", base)), 0o644); err != nil {
		need.Skip(t, "cannot write a perf map: %v", err)
	}
	defer os.Remove(path)
	s := newSymbolizer()
	s.refreshMaps(self)
	fr := s.user(self, []uint64{base + 0x10, base + 0x20})
	if len(fr) != 2 || fr[0].Func != "hot_loop" || fr[0].File != PythonFile || fr[0].Source != "/srv/hot.py" || fr[1].Func != "hot_loop" {
		t.Errorf("frames %+v, want hot_loop from the perf map", fr)
	}
}

// TestFPPythonTrampolines: with -X perf, CPython ≥ 3.12 writes a perf map
// of its trampolines, and the frame-pointer sampler names Python
// functions through it, where CPython keeps frame pointers. The CI and
// dev machines' python3 is 3.11: there it skips, saying that it runs on
// the H200 (make test-gpu; need.Device).
func TestFPPythonTrampolines(t *testing.T) {
	need.Root(t, "to load BPF programs and open perf events")
	py := need.Binary(t, "python3")
	out, err := exec.Command(py, "-c", "import sys, sysconfig; print(sys.version_info >= (3, 12), '-fno-omit-frame-pointer' in (sysconfig.get_config_var('CFLAGS') or ''), '%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		need.Dep(t, py+" (a working python3)", err)
	}
	v := strings.Fields(string(out))
	if len(v) != 3 {
		t.Fatalf("%s said %q", py, out)
	}
	if v[0] != "True" {
		need.Device(t, fmt.Sprintf("%s is CPython %s: perf trampolines need ≥ 3.12", py, v[2]))
	}
	framePointers := v[1] == "True"
	cmd, script := startHotPythonArgs(t, "-X", "perf")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(perfMapPath(cmd.Process.Pid)); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := NewSampler()
	if err := s.Start(context.Background(), 99); err != nil {
		if errors.Is(err, probe.ErrNotSupported) {
			probetest.NotSupported(t, "fp", "eBPF sampling not permitted here", err)
		}
		t.Fatalf("sampler: %v", err)
	}
	defer s.Stop()
	if err := s.Watch([]int{cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	stacks, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var hot, total uint64
	var src string
	for _, st := range stacks {
		total += st.Count
		for _, f := range st.Frames {
			if f.Func == "asrprof_hot_loop" && f.File == PythonFile {
				hot += st.Count
				src = f.Source
				break
			}
		}
	}
	t.Logf("%d samples, %d through asrprof_hot_loop's trampoline (%s); frame pointers in CFLAGS: %v", total, hot, src, framePointers)
	if hot == 0 && !framePointers {
		need.Device(t, "no sample names asrprof_hot_loop: "+py+" is built without frame pointers, so the walk stops before its trampolines")
	}
	if hot == 0 || src != script {
		t.Errorf("no sample names asrprof_hot_loop from %s through the perf map", script)
	}
}

func TestPerfSupportHint(t *testing.T) {
	if h := perfSupportHint(os.Getpid()); h != "" {
		t.Errorf("hint %q for a Go test binary, want none", h)
	}
	if h := perfSupportHint(1 << 30); h != "" {
		t.Errorf("hint %q for no process, want none", h)
	}
	// A process whose executable is named python3.13 (a copy of sleep).
	sleep := need.Binary(t, "sleep")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "python3.13")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if h := perfSupportHint(pid); !strings.Contains(h, "CPython 3.13 without a perf map: start it with PYTHONPERFSUPPORT=1") {
		t.Errorf("hint %q, want the PYTHONPERFSUPPORT advice", h)
	}
	if err := os.WriteFile(perfMapPath(pid), []byte("1000 10 py::f:/x.py\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(perfMapPath(pid))
	if h := perfSupportHint(pid); !strings.Contains(h, "named from the target's perf map") {
		t.Errorf("hint %q with a perf map", h)
	}
}
