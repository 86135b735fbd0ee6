package cuda

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestFindLibs(t *testing.T) {
	const maps = `55d0c0a28000-55d0c0d00000 r-xp 00028000 08:01 1234 /usr/bin/python3.11
7f1000000000-7f1000100000 r--p 00000000 08:01 77 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f1000100000-7f1000900000 r-xp 00100000 08:01 77 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f2000000000-7f2000100000 r-xp 00000000 08:02 88 /opt/venv/lib/libcudart.so.12
7f3000000000-7f3000100000 r-xp 00000000 00:00 0
`
	libs, err := findLibs(strings.NewReader(maps), DefaultLibPattern)
	if err != nil {
		t.Fatal(err)
	}
	want := []lib{{key: libKey{"08:01", 77}, path: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"}}
	if !reflect.DeepEqual(libs, want) {
		t.Errorf("findLibs = %+v, want %+v (libcudart is not the driver)", libs, want)
	}
	libs, err = findLibs(strings.NewReader(maps), "libcudart.so*")
	if err != nil || len(libs) != 1 || libs[0].path != "/opt/venv/lib/libcudart.so.12" {
		t.Errorf("findLibs with pattern libcudart.so*: %+v, %v", libs, err)
	}
	if _, err := findLibs(strings.NewReader(maps), "[x"); err == nil {
		t.Error("a malformed pattern was accepted")
	}
}

func TestRecords(t *testing.T) {
	t0 := time.Unix(100, 0)
	b := snapshot{at: t0, calls: map[callKey]uint64{{1, 2, 0}: 10, {1, 3, 2}: 5}}
	a := snapshot{
		at:    t0.Add(2 * time.Second),
		calls: map[callKey]uint64{{1, 2, 0}: 30, {1, 2, 1}: 4, {1, 3, 2}: 5},
		comm:  map[callKey]string{{1, 2, 0}: "w", {1, 2, 1}: "w"},
	}
	got := records(a, b, DefaultSymbols, probe.Period{Level: "c4", Repeat: 3})
	want := []bundle.CUDARecord{
		{Level: "c4", Repeat: 3, PID: 1, TID: 2, Name: "w", Symbol: "cuLaunchKernel", Calls: 20, PerSec: 10, WallSec: 2},
		{Level: "c4", Repeat: 3, PID: 1, TID: 2, Name: "w", Symbol: "cuLaunchKernelEx", Calls: 4, PerSec: 2, WallSec: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records =\n%+v\nwant\n%+v", got, want)
	}
}

func TestNotSupported(t *testing.T) {
	ctx := context.Background()
	if err := New().Start(ctx, probe.Target{}, &probetest.Sink{}); !errors.Is(err, probe.ErrNotSupported) {
		t.Errorf("Start without a pid: %v, want ErrNotSupported", err)
	}
	// This test process maps no libcuda.
	if err := New().Start(ctx, probe.Target{PID: os.Getpid()}, &probetest.Sink{}); !errors.Is(err, probe.ErrNotSupported) {
		t.Errorf("Start on a process without libcuda: %v, want ErrNotSupported", err)
	}
}

// buildApp compiles testdata/stub.c as libcuda.so.1 and testdata/app.c
// linked against it, in a temporary directory; it skips without a C
// compiler.
func buildApp(t *testing.T) string {
	t.Helper()
	cc := need.Binary(t, "cc") // the C compiler that builds the stub libcuda (Debian's gcc)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-O1", "-o", filepath.Join(dir, "libcuda.so.1"), "testdata/stub.c"},
		{"-O1", "-o", filepath.Join(dir, "app"), "testdata/app.c", "-L" + dir, "-l:libcuda.so.1", "-Wl,-rpath," + dir, "-pthread"},
	} {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	return filepath.Join(dir, "app")
}

// app is a running testdata/app.c (or syncapp.c).
type app struct {
	pid   int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Reader
}

// launchApp starts bin with args; stop ends it.
func launchApp(bin string, args ...string) (*app, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &app{pid: cmd.Process.Pid, cmd: cmd, stdin: stdin, lines: bufio.NewReader(stdout)}, nil
}

func (a *app) stop() {
	_ = a.stdin.Close()
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}

func startApp(t *testing.T, bin string, args ...int) *app {
	t.Helper()
	var argv []string
	for _, n := range args {
		argv = append(argv, fmt.Sprint(n))
	}
	a, err := launchApp(bin, argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	if s := a.line(t); !strings.HasPrefix(s, "ready") {
		t.Fatalf("app said %q", s)
	}
	return a
}

func (a *app) line(t *testing.T) string {
	t.Helper()
	return a.readLine(t, 10*time.Second)
}

// readLine returns the app's next line, failing tb after d without one.
func (a *app) readLine(tb testing.TB, d time.Duration) string {
	tb.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := a.lines.ReadString('\n')
		ch <- s
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(d):
		tb.Fatalf("app said nothing for %v", d)
		return ""
	}
}

// run lets the app make its calls and returns its main and launcher
// thread ids and the time per cuLaunchKernel call.
func (a *app) run(t *testing.T) (mainTID, launchTID int, ns float64) {
	t.Helper()
	if _, err := a.stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	s := a.line(t)
	if _, err := fmt.Sscanf(s, "done main=%d launch=%d ns=%g", &mainTID, &launchTID, &ns); err != nil {
		t.Fatalf("app said %q: %v", s, err)
	}
	return mainTID, launchTID, ns
}

func startProbe(t *testing.T, pid int, sink probe.Sink) *Probe {
	t.Helper()
	need.Root(t, "to load BPF programs and attach uprobes")
	p := New()
	probetest.Start(t, p, probe.Target{PID: pid}, sink, "uprobes not permitted here")
	return p
}

func TestCountsExactly(t *testing.T) {
	need.Root(t, "to load BPF programs and attach uprobes")
	bin := buildApp(t)
	const n1, n2, n3 = 1234, 567, 89
	a := startApp(t, bin, n1, n2, n3)
	sink := &probetest.Sink{}
	p := startProbe(t, a.pid, sink)

	per := probe.Period{Level: "c2", Repeat: 1}
	p.Begin(per)
	mainTID, launchTID, _ := a.run(t)
	if err := p.End(context.Background(), per); err != nil {
		t.Fatalf("End: %v", err)
	}
	recs, err := probetest.Decode[bundle.CUDARecord](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		tid    int
		symbol string
	}
	got := make(map[key]bundle.CUDARecord)
	for _, r := range recs {
		t.Logf("%+v", r)
		if r.PID != a.pid || r.Level != "c2" || r.Repeat != 1 || r.Warmup || r.WallSec <= 0 {
			t.Errorf("record %+v: want pid %d, level c2, repeat 1, wall_s > 0", r, a.pid)
		}
		if r.PerSec != float64(r.Calls)/r.WallSec {
			t.Errorf("per_s %g, want calls/wall_s %g", r.PerSec, float64(r.Calls)/r.WallSec)
		}
		got[key{r.TID, r.Symbol}] = r
	}
	want := map[key]uint64{
		{launchTID, "cuLaunchKernel"}:   n1,
		{launchTID, "cuLaunchKernelEx"}: n2,
		{mainTID, "cuGraphLaunch"}:      n3,
	}
	if len(got) != len(want) {
		t.Errorf("%d records, want %d", len(got), len(want))
	}
	for k, n := range want {
		r, ok := got[k]
		if !ok {
			t.Errorf("no record for %s in thread %d", k.symbol, k.tid)
			continue
		}
		if r.Calls != n {
			t.Errorf("%s in thread %d: %d calls, want exactly %d", k.symbol, k.tid, r.Calls, n)
		}
	}
	if r := got[key{launchTID, "cuLaunchKernel"}]; r.Name != "asrp-launch" {
		t.Errorf("launcher thread named %q, want asrp-launch", r.Name)
	}

	// A second period without calls writes nothing more.
	per2 := probe.Period{Level: "c2", Repeat: 2}
	p.Begin(per2)
	if err := p.End(context.Background(), per2); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.Lines(File)); n != len(recs) {
		t.Errorf("idle period added %d records", n-len(recs))
	}
}

// TestOverhead measures what a counted call costs: the calling thread's
// time per cuLaunchKernel with and without the uprobe, and the BPF
// program's own run time.
func TestOverhead(t *testing.T) {
	need.Root(t, "to load BPF programs and read their run time")
	probetest.EnableStats(t)
	bin := buildApp(t)
	const n = 200_000
	bare := startApp(t, bin, n, 0, 0)
	_, _, nsBare := bare.run(t)

	a := startApp(t, bin, n, 0, 0)
	p := startProbe(t, a.pid, &probetest.Sink{})
	o0, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	_, _, nsProbed := a.run(t)
	o1, err := p.Overhead()
	if err != nil {
		t.Fatal(err)
	}
	runs, rt := o1.Runs-o0.Runs, o1.Runtime-o0.Runtime
	if runs != n {
		t.Errorf("program ran %d times, want %d", runs, n)
	}
	t.Logf("per cuLaunchKernel call: %.1f ns bare, %.1f ns with the uprobe (+%.2f µs); BPF program %.0f ns/run; dropped %d",
		nsBare, nsProbed, (nsProbed-nsBare)/1000, float64(rt.Nanoseconds())/float64(max(runs, 1)), o1.Dropped)
	if nsProbed-nsBare > 50_000 {
		t.Errorf("a probed call costs %.1f µs more, want < 50 µs", (nsProbed-nsBare)/1000)
	}
}
