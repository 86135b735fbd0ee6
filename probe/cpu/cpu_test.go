package cpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestMain(m *testing.M) {
	runHotIfChild()
	os.Exit(m.Run())
}

func TestFileName(t *testing.T) {
	tests := []struct {
		per  probe.Period
		want string
	}{
		{probe.Period{Level: "c8", Repeat: 2}, "c8-2.pb.gz"},
		{probe.Period{Level: "c8", Repeat: 0, Warmup: true}, "c8-warmup.pb.gz"},
		{probe.Period{Level: "a/b c", Repeat: 1}, "a_b_c-1.pb.gz"},
		{probe.Period{}, "all-0.pb.gz"},
	}
	for _, tt := range tests {
		if got := FileName(tt.per); got != tt.want {
			t.Errorf("FileName(%+v) = %q, want %q", tt.per, got, tt.want)
		}
	}
}

func TestParseMaps(t *testing.T) {
	const maps = `55d0c0a00000-55d0c0a28000 r--p 00000000 08:01 1234 /usr/bin/python3.11
55d0c0a28000-55d0c0d00000 r-xp 00028000 08:01 1234 /usr/bin/python3.11
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
7f1000000000-7f1000100000 r-xp 00010000 08:01 99 /opt/my lib/libx.so (deleted)
7ffd1e5f0000-7ffd1e5f2000 r-xp 00000000 00:00 0                          [vdso]
`
	ms, err := proctree.ParseMaps(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{Start: 0x55d0c0a28000, Limit: 0x55d0c0d00000, Offset: 0x28000, Dev: "08:01", Inode: 1234, Path: "/usr/bin/python3.11"},
		{Start: 0x7f1000000000, Limit: 0x7f1000100000, Offset: 0x10000, Dev: "08:01", Inode: 99, Path: "/opt/my lib/libx.so (deleted)"},
		{Start: 0x7ffd1e5f0000, Limit: 0x7ffd1e5f2000, Dev: "00:00", Path: "[vdso]"},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Errorf("parseMaps =\n%+v\nwant\n%+v", ms, want)
	}
	for _, tt := range []struct {
		addr uint64
		ok   bool
		path string
	}{
		{0x55d0c0a28000, true, "/usr/bin/python3.11"},
		{0x55d0c0cfffff, true, "/usr/bin/python3.11"},
		{0x55d0c0d00000, false, ""},
		{0x55d0c0a00000, false, ""}, // not executable
		{0x7f1000000010, true, "/opt/my lib/libx.so (deleted)"},
	} {
		m, ok := findMapping(ms, tt.addr)
		if ok != tt.ok || m.Path != tt.path {
			t.Errorf("findMapping(%#x) = %q, %v; want %q, %v", tt.addr, m.Path, ok, tt.path, tt.ok)
		}
	}
}

func TestKallsyms(t *testing.T) {
	const text = `ffffffff81000000 T _stext
ffffffff81000100 t do_one
ffffffff81000200 D some_data
ffffffff81000300 W weak_fn
ffffffffc0000000 t mod_fn	[nvidia]
`
	st, err := parseKallsyms(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr uint64
		want string
	}{
		{0xffffffff81000000, "_stext"},
		{0xffffffff81000150, "do_one"},
		{0xffffffff81000250, "do_one"}, // data symbols are not functions
		{0xffffffff81000301, "weak_fn"},
		{0xffffffffc0000010, "mod_fn"},
	} {
		if got, _ := st.lookup(tt.addr); got != tt.want {
			t.Errorf("lookup(%#x) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if _, ok := st.lookup(0x1000); ok {
		t.Error("address below every symbol was named")
	}
	hidden, err := parseKallsyms(strings.NewReader("0000000000000000 T _stext\n0000000000000000 t x\n"))
	if err != nil || hidden != nil {
		t.Errorf("kallsyms with hidden addresses: %v, %v; want nil, nil", hidden, err)
	}
}

func TestSymtabLookup(t *testing.T) {
	st := newSymtab([]symbol{{Addr: 0x2000, Size: 0x10, Name: "b"}, {Addr: 0x1000, Size: 0x100, Name: "a"}, {Addr: 0x1000, Size: 4, Name: "a_alias"}}, nil)
	for _, tt := range []struct {
		addr uint64
		want string
		ok   bool
	}{
		{0x1000, "a", true},
		{0x10ff, "a", true},
		{0x1100, "", false}, // past a's size
		{0x200f, "b", true},
		{0xfff, "", false},
	} {
		got, ok := st.lookup(tt.addr)
		if got != tt.want || ok != tt.ok {
			t.Errorf("lookup(%#x) = %q, %v; want %q, %v", tt.addr, got, ok, tt.want, tt.ok)
		}
	}
}

//go:noinline
func symbolizeMe(n int) int { return n * 3 }

// TestSymbolizeSelf symbolizes an address of this test binary through
// /proc/self/maps and its ELF symbol table (no root needed).
func TestSymbolizeSelf(t *testing.T) {
	pc := reflect.ValueOf(symbolizeMe).Pointer()
	s := newSymbolizer()
	pid := os.Getpid()
	s.refreshMaps(pid)
	if len(s.maps[pid]) == 0 {
		t.Fatal("no executable mappings read from /proc/self/maps")
	}
	fr := s.user(pid, []uint64{uint64(pc) + 1})
	want := runtime.FuncForPC(pc).Name()
	if len(fr) != 1 || fr[0].Func != want {
		t.Fatalf("frames %+v, want one named %q", fr, want)
	}
	exe, _ := os.Executable()
	if fr[0].File != exe || fr[0].Start == 0 || fr[0].Limit <= fr[0].Start {
		t.Errorf("frame mapping %q [%#x,%#x), want %q with a range", fr[0].File, fr[0].Start, fr[0].Limit, exe)
	}
	// An address in no mapping is named as such, not dropped.
	if fr := s.user(pid, []uint64{8}); len(fr) != 1 || fr[0].Func != "[unknown]" {
		t.Errorf("unmapped address: %+v", fr)
	}
}

func TestBuildProfile(t *testing.T) {
	kern := Frame{Func: "do_syscall_64", Addr: 0xffffffff81000010, File: KernelFile}
	leaf := Frame{Func: "hot", Addr: 0x401010, File: "/bin/x", Start: 0x400000, Limit: 0x500000}
	root := Frame{Func: "main", Addr: 0x402020, File: "/bin/x", Start: 0x400000, Limit: 0x500000}
	stacks := []Stack{
		{PID: 10, TID: 11, Comm: "worker", Count: 7, Frames: []Frame{leaf, root}},
		{PID: 10, TID: 12, Comm: "io", Count: 3, Frames: []Frame{kern, root}},
	}
	begin := time.Unix(100, 0)
	prof := BuildProfile(stacks, probe.Period{Level: "c4", Repeat: 1}, 100, begin, begin.Add(2*time.Second))
	if err := prof.CheckValid(); err != nil {
		t.Fatal(err)
	}
	prof = roundTrip(t, prof)
	if len(prof.Sample) != 2 || len(prof.Location) != 3 || len(prof.Function) != 3 || len(prof.Mapping) != 2 {
		t.Fatalf("%d samples, %d locations, %d functions, %d mappings; want 2, 3, 3, 2",
			len(prof.Sample), len(prof.Location), len(prof.Function), len(prof.Mapping))
	}
	s := prof.Sample[0]
	if s.Value[0] != 7 || s.Value[1] != 7*10_000_000 {
		t.Errorf("values %v, want [7 70000000]", s.Value)
	}
	if got := s.Location[0].Line[0].Function.Name; got != "hot" {
		t.Errorf("leaf %q, want hot", got)
	}
	wantLabels := map[string][]string{"pid": {"10"}, "tid": {"11"}, "thread": {"worker"}, "level": {"c4"}}
	if !reflect.DeepEqual(s.Label, wantLabels) {
		t.Errorf("labels %v, want %v", s.Label, wantLabels)
	}
	if prof.DurationNanos != 2e9 || prof.TimeNanos != 100e9 || prof.Period != 10_000_000 {
		t.Errorf("duration %d, time %d, period %d", prof.DurationNanos, prof.TimeNanos, prof.Period)
	}
	if got := prof.SampleType[1]; got.Type != "cpu" || got.Unit != "nanoseconds" {
		t.Errorf("second sample type %+v, want cpu/nanoseconds", got)
	}
}

func roundTrip(t *testing.T, p *profile.Profile) *profile.Profile {
	t.Helper()
	var b strings.Builder
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("parsing the written profile: %v", err)
	}
	return q
}

// fakeAdapter returns canned stacks; it records what the probe asked.
type fakeAdapter struct {
	stacks  []Stack
	watched []int
	resets  int
	stopped bool
}

func (f *fakeAdapter) Start(ctx context.Context, hz int) error { return nil }
func (f *fakeAdapter) Watch(pids []int) error                  { f.watched = pids; return nil }
func (f *fakeAdapter) Reset(ctx context.Context) error         { f.resets++; return nil }
func (f *fakeAdapter) Collect(ctx context.Context) ([]Stack, error) {
	s := f.stacks
	f.stacks = nil
	return s, nil
}
func (f *fakeAdapter) Stop() error { f.stopped = true; return nil }

// TestProbeWithFake checks the probe's lifecycle and file naming without
// an engine: Begin resets, End writes cpu/<level>-<repeat>.pb.gz.
func TestProbeWithFake(t *testing.T) {
	fake := &fakeAdapter{}
	sink := &probetest.Sink{Dir: t.TempDir()}
	p := New(Config{Adapter: fake})
	if err := p.Start(context.Background(), probe.Target{PID: os.Getpid()}, sink); err != nil {
		t.Fatal(err)
	}
	if len(fake.watched) == 0 || fake.watched[0] != os.Getpid() {
		t.Errorf("watched %v, want this process first", fake.watched)
	}
	for _, per := range []probe.Period{{Level: "c2", Warmup: true}, {Level: "c2", Repeat: 1}} {
		p.Begin(per)
		fake.stacks = []Stack{{PID: 1, TID: 2, Comm: "w", Count: 5, Frames: []Frame{{Func: "f", File: "/x"}}}}
		if err := p.End(context.Background(), per); err != nil {
			t.Fatal(err)
		}
	}
	if fake.resets != 2 {
		t.Errorf("%d resets, want 2 (one per Begin)", fake.resets)
	}
	for _, name := range []string{"c2-warmup.pb.gz", "c2-1.pb.gz"} {
		f, err := os.Open(filepath.Join(sink.Dir, Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		prof, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(prof.Sample) != 1 || prof.Sample[0].Value[0] != 5 {
			t.Errorf("%s: samples %v", name, prof.Sample)
		}
	}
	if err := p.Stop(context.Background()); err != nil || !fake.stopped {
		t.Errorf("Stop: %v, engine stopped %v", err, fake.stopped)
	}
}

func TestNotSupported(t *testing.T) {
	if err := New(Config{}).Start(context.Background(), probe.Target{}, &probetest.Sink{}); !errors.Is(err, probe.ErrNotSupported) {
		t.Errorf("Start without a pid: %v, want ErrNotSupported", err)
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", unix.EPERM), true},
		{fmt.Errorf("x: %w", unix.EACCES), true},
		{fmt.Errorf("x: %w", unix.EINVAL), false},
	} {
		if got := errors.Is(notSupported(tt.err), probe.ErrNotSupported); got != tt.want {
			t.Errorf("notSupported(%v): %v, want %v", tt.err, got, tt.want)
		}
	}
}
