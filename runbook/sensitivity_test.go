package runbook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/table"
)

// Hand-computed: cycle 1 halves the CPU and the throughput (10 → 5 req/s:
// sensitivity 1); cycle 2 halves the CPU for a 40 % drop (10 → 6: 0.8).
// The slope through the origin over both: Σ d·r / Σ d² = (0.25 + 0.2) /
// 0.5 = 0.9. The decode stage doubles in cycle 1 (rate −50 %: 1) and
// grows by 25 % in cycle 2 (rate 1/1.25 − 1 = −0.2: 0.4); together
// (0.25 + 0.1) / 0.5 = 0.7. The build stage (1 % of the total) is left out.
func TestEstimate(t *testing.T) {
	run := func(cycle int, share, tput, decode, total float64) bundle.SensitivityRun {
		return bundle.SensitivityRun{Dir: "x", Cycle: cycle, Allotment: share, ThroughputReqS: tput,
			StagesMs: map[string]float64{"decode tail": decode, "total": total, "build": total / 100}}
	}
	rep := &bundle.SensitivityReport{Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []bundle.SensitivityRun{
		run(1, 1, 10, 100, 200), run(1, 0.5, 5, 200, 400),
		run(2, 1, 10, 100, 200), run(2, 0.5, 6, 125, 333),
	}}
	estimate(rep)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("overall", rep.Overall.Value, 0.9)
	if rep.Overall.N != 2 || rep.Overall.Lo < 0.8-1e-9 || rep.Overall.Hi > 1+1e-9 || rep.Overall.Lo > rep.Overall.Hi {
		t.Errorf("interval %+v, want within [0.8, 1]", rep.Overall)
	}
	if len(rep.PerAllotment) != 1 || rep.PerAllotment[0].Name != "50 %" {
		t.Fatalf("per allotment %+v", rep.PerAllotment)
	}
	near("at 50 %", rep.PerAllotment[0].Value, 0.9)
	names := []string{}
	for _, e := range rep.Stages {
		names = append(names, e.Name)
		if e.Name == "decode tail" {
			near("decode tail", e.Value, 0.7)
		}
	}
	if !reflect.DeepEqual(names, []string{"decode tail", "total"}) {
		t.Errorf("stages %v, want decode tail and total (build is 1 %% of the total)", names)
	}
	if rep.Verdict != "host-bound" {
		t.Errorf("verdict %q", rep.Verdict)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "build") {
		t.Errorf("notes %v do not say build was left out", rep.Notes)
	}
	// A server whose throughput does not move: ≈ 0.
	flat := &bundle.SensitivityReport{Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []bundle.SensitivityRun{
		run(1, 1, 10, 100, 200), run(1, 0.5, 9.9, 100, 200),
	}}
	estimate(flat)
	near("flat", flat.Overall.Value, 0.02)
	if flat.Verdict != "not CPU-bound" {
		t.Errorf("flat verdict %q", flat.Verdict)
	}
	// A restricted run without its cycle's unrestricted one counts nowhere.
	lone := &bundle.SensitivityReport{Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []bundle.SensitivityRun{run(1, 0.5, 5, 1, 1)}}
	estimate(lone)
	if lone.Overall.N != 0 || lone.Verdict != "unknown" {
		t.Errorf("lone %+v", lone)
	}
}

func TestAllotments(t *testing.T) {
	got, err := ParseAllotments("75%, 50%,100%")
	if err != nil || !reflect.DeepEqual(got, []float64{0.75, 0.5, 1}) {
		t.Fatalf("%v %v", got, err)
	}
	sc := SensitivityConfig{Allotments: []float64{0.5, 0.75}, Cycles: 1, Server: ServerCmd{Argv: []string{"x"}}}
	sc.Runbook.Capture.Concurrency = []int{2}
	if err := checkSensitivity(&sc); err != nil || !reflect.DeepEqual(sc.Allotments, []float64{1, 0.75, 0.5}) {
		t.Errorf("%v %v", sc.Allotments, err)
	}
	for _, bad := range [][]float64{{1.5}, {1}, {0}} {
		sc := SensitivityConfig{Allotments: bad, Cycles: 1, Server: ServerCmd{Argv: []string{"x"}}}
		sc.Runbook.Capture.Concurrency = []int{2}
		if err := checkSensitivity(&sc); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if _, err := ParseAllotments("half"); err == nil {
		t.Error("half accepted")
	}
}

// fakeClocks records the clock locks; err makes every call fail.
type fakeClocks struct {
	calls []string
	err   error
}

func (f *fakeClocks) Lock(mhz int) error {
	f.calls = append(f.calls, fmt.Sprintf("lock %d", mhz))
	return f.err
}
func (f *fakeClocks) Reset() error { f.calls = append(f.calls, "reset"); return f.err }

// A GPU-clock session against the fake server: every run gets its clock
// locked once its server is healthy and reset after its capture; the
// fake server's speed does not depend on the clock, so the sensitivity is
// near 0.
func TestSensitivityGPUClocks(t *testing.T) {
	port := fakeasr.FreePort(t)
	cfg := testConfig(t, port, nil)
	fc := &fakeClocks{}
	sc := SensitivityConfig{Runbook: cfg, Server: fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK, Delay: 100 * time.Millisecond}),
		Cycles: 2, GPUClocks: []int{1980, 990}, Clocks: fc}
	var out, errb bytes.Buffer
	rep, err := Sensitivity(context.Background(), sc, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errb.String())
	}
	want := "reset lock 1980 reset lock 990 reset lock 1980 reset lock 990 reset reset"
	if got := strings.Join(fc.calls, " "); got != want {
		t.Errorf("clock calls %q, want %q", got, want)
	}
	if rep.Kind != "gpu-clocks" || len(rep.Runs) != 4 || rep.Runs[1].Dir != "gpu990mhz-1" || rep.Runs[1].ClockMHz != 990 || rep.Runs[1].Allotment != 0.5 {
		t.Fatalf("%+v", rep)
	}
	if rep.Overall.N != 2 || math.Abs(rep.Overall.Value) > 0.3 || strings.HasPrefix(rep.Verdict, "GPU-bound") {
		t.Errorf("the fake server's clock sensitivity %+v, verdict %q: want ≈ 0", rep.Overall, rep.Verdict)
	}
	if !strings.HasPrefix(out.String(), "GPU-clock sensitivity at c=1: ") || !regexp.MustCompile(`50 %\s+gpu990mhz-1\s+GPU at 990 MHz`).MatchString(out.String()) {
		t.Errorf("table:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "gpu990mhz-1 (2 of 4): GPU at 990 MHz (50 %) → ") {
		t.Errorf("stderr:\n%s", errb.String())
	}
	// Where NVML refuses, nothing starts.
	fc = &fakeClocks{err: fmt.Errorf("no NVML: %w", probe.ErrNotSupported)}
	sc.Clocks = fc
	sc.Runbook.Capture.Out = filepath.Join(t.TempDir(), "o")
	if _, err := Sensitivity(context.Background(), sc, &out, &errb); !errors.Is(err, probe.ErrNotSupported) || len(fc.calls) != 1 {
		t.Errorf("err %v, calls %v", err, fc.calls)
	}
}

// What 100 % is, from the unrestricted run's threads: a core per busy
// thread (one that ran 0.2 of a core, or 0.1 and was runnable half the
// time), at least
// one and at least the cores it used, at most its CPUs; and the share of
// their runnable time the busy threads ran (three sharing 2 cores ran
// 1.9 of the 3 they wanted: 0.633 × 3/2 = 0.95 of what 2 cores give).
func TestSensitivityCapacityOf(t *testing.T) {
	th := func(tid int, cores, wait float64) bundle.ThreadUse {
		return bundle.ThreadUse{PID: 1, TID: tid, Cores: cores, WaitCores: wait}
	}
	for _, tc := range []struct {
		name    string
		used    float64
		threads []bundle.ThreadUse
		ncpu    int
		cores   float64
		why     string
		ran     float64
	}{
		{"a sleeper", 0.09, []bundle.ThreadUse{th(1, 0.05, 0.04), th(2, 0.04, 0.01)}, 2, 1, "no busy thread (none ran 0.2 of a core), so one core", 1},
		{"one computing thread, other load beside it", 0.8, []bundle.ThreadUse{th(1, 0.74, 0.26), th(2, 0.06, 0)}, 2, 1, "1 busy thread", 0.74},
		{"a thread held back by other load still counts", 0.15, []bundle.ThreadUse{th(1, 0.15, 0.85)}, 2, 1, "1 busy thread", 0.15},
		{"two held back", 0.3, []bundle.ThreadUse{th(1, 0.15, 0.85), th(2, 0.15, 0.7)}, 2, 2, "2 busy threads", 0.3 / 1.85 * 1},
		{"a sleeper that waits for its wakeups on a loaded host does not", 0.47, []bundle.ThreadUse{th(1, 0.44, 0.54), th(2, 0.03, 0.19)}, 2, 1, "1 busy thread", 0.44 / 0.98},
		{"two busy threads", 1.5, []bundle.ThreadUse{th(1, 0.9, 0), th(2, 0.6, 0)}, 4, 2, "2 busy threads", 1},
		{"three busy threads on 2 CPUs", 1.9, []bundle.ThreadUse{th(1, 0.7, 0.3), th(2, 0.6, 0.4), th(3, 0.6, 0.4)}, 2, 2, "3 busy threads, capped by the 2 CPUs it may run on", 0.95},
		{"many light threads", 1.5, []bundle.ThreadUse{th(1, 0.15, 0), th(2, 0.15, 0), th(3, 0.15, 0), th(4, 0.15, 0), th(5, 0.15, 0), th(6, 0.15, 0), th(7, 0.15, 0), th(8, 0.15, 0), th(9, 0.15, 0), th(10, 0.15, 0)}, 4, 2, "no busy thread (none ran 0.2 of a core), so one core, and it used 1.50 cores", 1},
		{"1.02 cores measured is one", 1.02, []bundle.ThreadUse{th(1, 1.02, 0)}, 2, 1, "1 busy thread", 1},
	} {
		c := capacityOf(tc.used, tc.threads, tc.ncpu)
		if c.cores != tc.cores || c.why != tc.why || math.Abs(c.ran-tc.ran) > 1e-9 {
			t.Errorf("%s: %v cores %q ran %.3f; want %v %q %.3f", tc.name, c.cores, c.why, c.ran, tc.cores, tc.why, tc.ran)
		}
	}
}

// The slope is taken against the effective allotment where the run has
// one (a quota of 0.5 cores is 0.5/0.74 of what a thread held to 74 % of
// its runnable time could get); a run whose limit took nothing is left
// out, with a note; the slope against the CPU received is beside it.
// Hand-computed: cycle 1: 100 % 10 req/s on 0.74 cores; the 0.5-core
// quota (effective 0.5/0.74 = 0.6757) gives 6.757 req/s on 0.5 cores: r =
// d = −0.3243, slope 1; against the quota's nominal 50 % it would be 0.65.
func TestSensitivityEstimateEffective(t *testing.T) {
	eff := 0.5 / 0.74
	rep := &bundle.SensitivityReport{Kind: "cpu", Method: "cgroup1 cpu.cfs_quota_us", Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []bundle.SensitivityRun{
		{Dir: "cpu100-1", Cycle: 1, Allotment: 1, ThroughputReqS: 10, UsedCores: 0.74, BaseCores: 1, BaseWhy: "1 busy thread"},
		{Dir: "cpu50-1", Cycle: 1, Allotment: 0.5, Effective: eff, Quota: 0.5, ThroughputReqS: 10 * eff, UsedCores: 0.5},
		{Dir: "cpu100-2", Cycle: 2, Allotment: 1, ThroughputReqS: 10, UsedCores: 0.3, BaseCores: 1, BaseWhy: "1 busy thread"},
		{Dir: "cpu50-2", Cycle: 2, Allotment: 0.5, Effective: 1, Quota: 0.5, ThroughputReqS: 10, UsedCores: 0.3},
	}}
	estimate(rep)
	if math.Abs(rep.Overall.Value-1) > 1e-9 || rep.Overall.N != 1 || rep.Verdict != "host-bound" {
		t.Errorf("overall %+v %q, want 1 over cycle 1 only", rep.Overall, rep.Verdict)
	}
	if rep.Received == nil || math.Abs(rep.Received.Value-1) > 1e-9 {
		t.Errorf("received %+v", rep.Received)
	}
	if rep.Base != "1 core: 1 busy thread" || rep.Against != "the quota, as a share of the CPU the server could get" {
		t.Errorf("base %q against %q", rep.Base, rep.Against)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "left out, their limit took under 5 % of what the server could get here: cpu50-2") {
		t.Errorf("notes %v", rep.Notes)
	}
	// A server that lost half its CPU and kept its throughput: the CPU it
	// lost was not work.
	spin := &bundle.SensitivityReport{Kind: "cpu", Method: MethodCoRunner, Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []bundle.SensitivityRun{
		{Dir: "cpu100-1", Cycle: 1, Allotment: 1, ThroughputReqS: 10, UsedCores: 1},
		{Dir: "cpu50-1", Cycle: 1, Allotment: 0.5, Effective: 0.5, ThroughputReqS: 9.5, UsedCores: 0.5},
	}}
	estimate(spin)
	if math.Abs(spin.Overall.Value-0.1) > 1e-9 || spin.Verdict != "not CPU-bound" || !strings.Contains(strings.Join(spin.Notes, "\n"), "was not its work") {
		t.Errorf("%+v %q %v", spin.Overall, spin.Verdict, spin.Notes)
	}
	tabs := SensitivityTables(spin)
	var b bytes.Buffer
	if err := table.Render(&b, "table", tabs...); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(b.String(), "\n"); !strings.HasPrefix(first, "CPU sensitivity at : not CPU-bound, 0.10 [0.10, 0.10] against the co-runner's share") {
		t.Errorf("first line %q", first)
	}
}
