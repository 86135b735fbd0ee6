package analysis

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/asrprof/asrprof/bundle"
)

// writePythonProfile writes a profile of two stacks, as the cpu probe's
// otel engine records them: n samples in PyObject_Free called from the
// Python function tokenize (x.py) called from <module>, and 1 sample
// with no Python frame.
func writePythonProfile(t *testing.T, path string, n int64) {
	t.Helper()
	bin := &profile.Mapping{ID: 1, File: "/usr/bin/python3.12", HasFunctions: true}
	py := &profile.Mapping{ID: 2, File: PythonMapping, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
	free := &profile.Function{ID: 1, Name: "PyObject_Free"}
	tok := &profile.Function{ID: 2, Name: "tokenize", Filename: "/srv/x.py"}
	mod := &profile.Function{ID: 3, Name: "<module>", Filename: "/srv/x.py"}
	spin := &profile.Function{ID: 4, Name: "epoll_wait"}
	loc := func(id uint64, m *profile.Mapping, f *profile.Function, line int64) *profile.Location {
		return &profile.Location{ID: id, Mapping: m, Line: []profile.Line{{Function: f, Line: line}}}
	}
	l1, l2, l3, l4 := loc(1, bin, free, 0), loc(2, py, tok, 6), loc(3, py, mod, 9), loc(4, bin, spin, 0)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10_000_000,
		Mapping:  []*profile.Mapping{bin, py},
		Function: []*profile.Function{free, tok, mod, spin},
		Location: []*profile.Location{l1, l2, l3, l4},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{l1, l2, l3}, Value: []int64{n, n * 10_000_000},
				Label: map[string][]string{"tid": {"101"}, "thread": {"asr-sched"}}},
			{Location: []*profile.Location{l4}, Value: []int64{1, 10_000_000},
				Label: map[string][]string{"tid": {"102"}, "thread": {"asr-http"}}},
		},
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
}

func TestPythonFunctions(t *testing.T) {
	dir, _ := writeFixture(t, "refserver")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	lv := c.Bundle.Manifest.Levels[0].Level
	writePythonProfile(t, filepath.Join(dir, "cpu", lv+"-1.pb.gz"), 3)

	s, err := summarizeProfile(filepath.Join(dir, "cpu", lv+"-1.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }
	if !near(s.TotalS, 0.04) || !near(s.PythonS, 0.03) {
		t.Errorf("total %.3f s, python %.3f s; want 0.04 and 0.03", s.TotalS, s.PythonS)
	}
	// The native leaf's time is charged to the innermost Python frame.
	if len(s.TopPython) != 1 || s.TopPython[0].Function != "tokenize (x.py)" || !near(s.TopPython[0].FlatS, 0.03) || !near(s.TopPython[0].FlatPct, 75) {
		t.Errorf("top python %+v, want tokenize (x.py) with 0.03 s, 75 %%", s.TopPython)
	}
	if s.Top[0].Function != "PyObject_Free" {
		t.Errorf("top leaf %+v, want PyObject_Free", s.Top)
	}
	// Per thread: the scheduler's samples are all tokenize's.
	if len(s.Threads) != 2 || s.Threads[0].TID != 101 || s.Threads[0].Thread != "asr-sched" ||
		len(s.Threads[0].TopPython) != 1 || !near(s.Threads[0].TopPython[0].FlatPct, 100) ||
		s.Threads[1].TID != 102 || len(s.Threads[1].TopPython) != 0 || s.Threads[1].Top[0].Function != "epoll_wait" {
		t.Errorf("threads %+v", s.Threads)
	}

	jt := decodeTables(t, runScripts(t, c, Options{}, "json", "cpu"))
	found := false
	for _, tb := range jt.Tables {
		if tb.Name != "cpu_python" {
			continue
		}
		found = true
		if len(tb.Rows) != 1 || tb.Rows[0][1] != "tokenize (x.py)" {
			t.Errorf("cpu_python rows %v, want tokenize (x.py)", tb.Rows)
		}
	}
	if !found {
		t.Errorf("cpu.star emitted no cpu_python table for a profile with Python frames")
	}
}

// TestCompareCPU: compare adds the share of CPU per Python function when
// both captures name Python frames.
func TestCompareCPU(t *testing.T) {
	load := func(name string, tok int64) *Capture {
		dir, _ := writeFixture(t, name)
		c, err := loadT(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range c.Bundle.Manifest.Levels {
			if !l.Warmup {
				writePythonProfile(t, filepath.Join(dir, "cpu", l.Level+"-"+itoa(l.Repeat)+".pb.gz"), tok)
			}
		}
		return c
	}
	cur, base := load("refserver", 1), load("refserver", 3) // tokenize: 50 % now, 75 % before
	jt := decodeTables(t, runScripts(t, cur, Options{Baseline: base}, "json", "compare"))
	for _, tb := range jt.Tables {
		if tb.Name != "compare_cpu" {
			continue
		}
		if len(tb.Rows) == 0 {
			t.Fatal("compare_cpu has no rows")
		}
		r := tb.Rows[0]
		near := func(v any, want float64) bool { f, _ := v.(float64); return math.Abs(f-want) < 1e-9 }
		if r[1] != "tokenize (x.py)" || !near(r[2], 50) || !near(r[3], 75) || !near(r[4], -25) {
			t.Errorf("first row %v, want tokenize (x.py) 50 vs 75, -25 points", r)
		}
		return
	}
	t.Errorf("compare emitted no compare_cpu table")
}

// TestBottleneckNamesHottestCode: a thread near a whole core is named
// beside the verdict with its hottest code from the CPU profiles, once
// enough of its CPU was sampled (HOT_MIN_S); with less, the line says so.
func TestBottleneckNamesHottestCode(t *testing.T) {
	for _, c := range []struct {
		samples int64 // a profile, three profiles at c=64
		want    string
	}{
		{30, "hottest code tokenize (x.py) (100 % of its samples)"},            // 0.9 s sampled
		{3, "hottest code not named: 0.09 s of its CPU sampled (under 0.5 s)"}, // 9 samples
	} {
		dir, _ := writeFixture(t, "refserver") // asr-sched (tid 101) at 0.98 of a core at c=64
		for _, rep := range []string{"1", "2", "3"} {
			writePythonProfile(t, filepath.Join(dir, "cpu", "c64-"+rep+".pb.gz"), c.samples)
		}
		cp, err := loadT(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		out := runScripts(t, cp, Options{}, "text", "bottleneck")
		if !strings.Contains(out, "asr-sched (tid 101) at 98 % of a core; GPU util") || !strings.Contains(out, c.want) {
			t.Errorf("%d samples a profile: bottleneck claims lack %q:\n%s", c.samples, c.want, out)
		}
	}
}

// TestFrameNameDemangles: C++ frames read as pprof shows them, without
// parameters or template arguments; kernel frames and plain C names stay.
func TestFrameNameDemangles(t *testing.T) {
	lib := &profile.Mapping{File: "/usr/lib/python3/dist-packages/numpy/fft/_pocketfft_umath.so"}
	kern := &profile.Mapping{File: KernelMapping}
	for _, c := range []struct {
		m          *profile.Mapping
		name, want string
	}{
		{lib, "_ZZN9pocketfft6detail11general_r2cIdEEvRKNS0_6cndarrIT_EERNS0_5ndarrINS0_5cmplxIS3_EEEEmbS3_mENKUlvE_clEv", "pocketfft::detail::general_r2c()::{lambda()#1}::operator()"},
		{lib, "pthread_mutex_lock", "pthread_mutex_lock"},
		{kern, "clear_page_erms", "[kernel] clear_page_erms"},
	} {
		loc := &profile.Location{Mapping: c.m, Line: []profile.Line{{Function: &profile.Function{Name: c.name}}}}
		if got := frameName(loc); got != c.want {
			t.Errorf("frameName(%s) = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestStackNotesSampledShare: the cpu analysis says how little of the
// server's CPU time (sched.jsonl, the same passes) the profiles hold
// when it is under SAMPLED_SHARE, and says nothing when they hold it.
func TestStackNotesSampledShare(t *testing.T) {
	dir, _ := writeFixture(t, "refserver")
	recs, err := bundle.ReadAll[bundle.SchedRecord](filepath.Join(dir, bundle.SchedFile))
	if err != nil {
		t.Fatal(err)
	}
	cpu := 0.0
	for _, r := range recs {
		if r.Level == "c64" && !r.Warmup {
			cpu += r.CPUSec
		}
	}
	// a profile holds n+1 samples of 10 ms; three profiles at c64
	enough := int64(math.Ceil(cpu/0.03)) + 1
	for _, c := range []struct {
		n    int64
		note bool
	}{{3, true}, {enough, false}} {
		for _, rep := range []string{"1", "2", "3"} {
			writePythonProfile(t, filepath.Join(dir, "cpu", "c64-"+rep+".pb.gz"), c.n)
		}
		cp, err := loadT(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		out := runScripts(t, cp, Options{}, "text", "cpu")
		if got := strings.Contains(out, "sampled: the profiles hold"); got != c.note {
			t.Errorf("%d samples a profile against %.2f s of CPU: the note is there %v, want %v\n%s", c.n+1, cpu, got, c.note, out)
		}
	}
}
