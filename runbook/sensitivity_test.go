package runbook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/probe"
)

// Hand-computed: cycle 1 halves the CPU and the throughput (10 → 5 req/s:
// sensitivity 1); cycle 2 halves the CPU for a 40 % drop (10 → 6: 0.8).
// The slope through the origin over both: Σ d·r / Σ d² = (0.25 + 0.2) /
// 0.5 = 0.9. The decode stage doubles in cycle 1 (rate −50 %: 1) and
// grows by 25 % in cycle 2 (rate 1/1.25 − 1 = −0.2: 0.4); together
// (0.25 + 0.1) / 0.5 = 0.7. The build stage (1 % of the total) is left out.
func TestEstimate(t *testing.T) {
	run := func(cycle int, share, tput, decode, total float64) SensitivityRun {
		return SensitivityRun{Dir: "x", Cycle: cycle, Allotment: share, ThroughputReqS: tput,
			StagesMs: map[string]float64{"decode tail": decode, "total": total, "build": total / 100}}
	}
	rep := &SensitivityReport{Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []SensitivityRun{
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
	flat := &SensitivityReport{Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []SensitivityRun{
		run(1, 1, 10, 100, 200), run(1, 0.5, 9.9, 100, 200),
	}}
	estimate(flat)
	near("flat", flat.Overall.Value, 0.02)
	if flat.Verdict != "not CPU-bound" {
		t.Errorf("flat verdict %q", flat.Verdict)
	}
	// A restricted run without its cycle's unrestricted one counts nowhere.
	lone := &SensitivityReport{Allotments: []float64{1, 0.5}, Confidence: 0.95, Runs: []SensitivityRun{run(1, 0.5, 5, 1, 1)}}
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
	if !strings.Contains(out.String(), "GPU-clock sensitivity") || !strings.Contains(out.String(), "gpu990mhz-1: GPU at 990 MHz") {
		t.Errorf("table:\n%s", out.String())
	}
	// Where NVML refuses, nothing starts.
	fc = &fakeClocks{err: fmt.Errorf("no NVML: %w", probe.ErrNotSupported)}
	sc.Clocks = fc
	sc.Runbook.Capture.Out = filepath.Join(t.TempDir(), "o")
	if _, err := Sensitivity(context.Background(), sc, &out, &errb); !errors.Is(err, probe.ErrNotSupported) || len(fc.calls) != 1 {
		t.Errorf("err %v, calls %v", err, fc.calls)
	}
}
