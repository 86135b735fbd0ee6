package runbook

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/bundletest"
	"github.com/asrprof/asrprof/table"
)

func f(x float64) *float64 { return &x }

func TestEditCommand(t *testing.T) {
	ref := []string{"python3", "refserver/refserver.py", "--port", "8000"}
	for _, tc := range []struct {
		name  string
		argv  []string
		a     bundle.WhatIfAdvice
		flags map[string]string
		want  string // the edited command, or the error's text
		where string
	}{
		{"value replaced", append(ref, "--max-running-requests", "1"), bundle.WhatIfAdvice{Knob: KnobMaxRunning, To: f(4)}, nil,
			"python3 refserver/refserver.py --port 8000 --max-running-requests 4", "replaced"},
		{"value replaced, = form", append(ref, "--build-workers=1"), bundle.WhatIfAdvice{Knob: KnobBuildWorkers, To: f(3)}, nil,
			"python3 refserver/refserver.py --port 8000 --build-workers=3", "replaced"},
		{"value appended to refserver", ref, bundle.WhatIfAdvice{Knob: KnobMaxRunning, To: f(8)}, nil,
			"python3 refserver/refserver.py --port 8000 --max-running-requests 8", "appended"},
		{"scaled from refserver's default", ref, bundle.WhatIfAdvice{Knob: KnobPrefillBatch, From: f(1), To: f(2)}, nil,
			"python3 refserver/refserver.py --port 8000 --prefill-batch 2", "appended"},
		{"scaled from the command's", append(ref, "--prefill-batch", "2"), bundle.WhatIfAdvice{Knob: KnobPrefillBatch, From: f(1), To: f(2)}, nil,
			"python3 refserver/refserver.py --port 8000 --prefill-batch 4", "replaced"},
		{"the last of two counts", append(ref, "--max-running-requests", "1", "--max-running-requests", "2"), bundle.WhatIfAdvice{Knob: KnobMaxRunning, To: f(5)}, nil,
			"python3 refserver/refserver.py --port 8000 --max-running-requests 1 --max-running-requests 5", "replaced"},
		{"switch on", ref, bundle.WhatIfAdvice{Knob: KnobCUDAGraphs, To: f(1)}, nil,
			"python3 refserver/refserver.py --port 8000 --cuda-graphs", "appended"},
		{"switch off", append(ref, "--cuda-graphs"), bundle.WhatIfAdvice{Knob: KnobCUDAGraphs, To: f(0)}, nil,
			"python3 refserver/refserver.py --port 8000", "removed"},
		{"scaled", append(ref, "--host-step-ms", "20"), bundle.WhatIfAdvice{Knob: KnobHostWork, From: f(4), To: f(1)}, nil,
			"python3 refserver/refserver.py --port 8000 --host-step-ms 5", "replaced"},
		{"scaled from 0", ref, bundle.WhatIfAdvice{Knob: KnobHostWork, From: f(4), To: f(1)}, nil,
			"--host-step-ms is 0 in the command (or by default)", ""},
		{"scaled without from", append(ref, "--host-step-ms", "20"), bundle.WhatIfAdvice{Knob: KnobHostWork, To: f(1)}, nil,
			"a scaled knob needs a from value", ""},
		{"user flag", []string{"vllm", "serve", "m"}, bundle.WhatIfAdvice{Knob: KnobMaxRunning, To: f(64)}, map[string]string{KnobMaxRunning: "--max-num-seqs"},
			"vllm serve m --max-num-seqs 64", "appended"},
		{"flag in another server's command", []string{"srv", "--max-running-requests", "2"}, bundle.WhatIfAdvice{Knob: KnobMaxRunning, To: f(3)}, nil,
			"srv --max-running-requests 3", "replaced"},
		{"no mapping", []string{"srv"}, bundle.WhatIfAdvice{Knob: KnobMaxRunning, To: f(3)}, nil,
			"has no --max-running-requests and does not run refserver/refserver.py", ""},
		{"no to", ref, bundle.WhatIfAdvice{Knob: KnobMaxRunning}, nil, "gives no to value", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := EditCommand(tc.argv, tc.a, tc.flags)
			if tc.where == "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(e.Argv, " "); got != tc.want || e.Where != tc.where {
				t.Errorf("got %q (%s), want %q (%s)", got, e.Where, tc.want, tc.where)
			}
			if strings.Join(tc.argv, " ") == strings.Join(e.Argv, " ") && e.Where != "unchanged" {
				t.Error("the edit changed nothing")
			}
		})
	}
}

// The built-in knobs' flags and defaults are the reference server's.
func TestKnobsAreRefserverFlags(t *testing.T) {
	var src string
	for _, f := range []string{"refserver.py", "whisper_engine.py"} {
		b, err := os.ReadFile(filepath.Join("..", "refserver", f))
		if err != nil {
			t.Fatal(err)
		}
		src += string(b)
	}
	for _, k := range Knobs() {
		m := regexp.MustCompile(`add_argument\("` + regexp.QuoteMeta(k.Flag) + `",([^)]*)`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("%s: refserver has no %s", k.Name, k.Flag)
			continue
		}
		switch k.Kind {
		case KnobSwitch:
			if !strings.Contains(m[1], `action="store_true"`) {
				t.Errorf("%s: %s is not a switch in refserver: %s", k.Name, k.Flag, m[1])
			}
		default:
			if !strings.Contains(m[1], "default="+k.Default+",") {
				t.Errorf("%s: %s's default in refserver is not %s: %s", k.Name, k.Flag, k.Default, m[1])
			}
		}
	}
}

var adviceColumns = []string{"level", "cause", "knob", "from", "to", "change", "metric", "now", "predicted", "lo", "hi", "basis"}

func TestParseAdviceAndPick(t *testing.T) {
	tab := &table.Table{Name: "advice", Columns: adviceColumns}
	tab.AddRow("c1", "client-bound", "", nil, nil, "", "requests_per_s", 1.0, nil, nil, nil, "no knob")
	tab.AddRow("c16", "admission-bound", "max_running", 8.0, 16.0, "raise", "latency_p95_ms", 900.0, 600.0, 500.0, 700.0, "queue model")
	tab.AddRow("c8", "build-bound", "build_workers", 2.0, 4.0, "more", "requests_per_s", 5.0, 8.0, 7.0, 9.0, "x")
	rows, err := ParseAdvice(tab, "t")
	if err != nil {
		t.Fatal(err)
	}
	a, knob, err := PickAdvice(rows, "")
	if err != nil || !knob || a.Level != "c16" || *a.To != 16 {
		t.Errorf("default pick %+v %v %v", a, knob, err)
	}
	if a, knob, _ := PickAdvice(rows, "c1"); knob || a.Cause != "client-bound" {
		t.Errorf("c1: %+v %v", a, knob)
	}
	bad := &table.Table{Name: "advice", Columns: adviceColumns}
	bad.AddRow("c1", "x", "max_running", "one", 2.0, "", "requests_per_s", 1.0, 2.0, 1.0, 3.0, "")
	if _, err := ParseAdvice(bad, "t"); !errors.Is(err, ErrBadAdvice) || !strings.Contains(err.Error(), "row 1, column from: one is not a number") {
		t.Errorf("bad cell: %v", err)
	}
	if _, err := ParseAdvice(&table.Table{Columns: []string{"level"}}, "t"); err == nil || !strings.Contains(err.Error(), `no column "cause"`) {
		t.Errorf("missing column: %v", err)
	}
}

// bundle.WhatIfAdvice decodes the advice table the bottleneck analysis
// makes of an H200 capture: a column renamed in scripts/bottleneck.star
// fails here (naming it), not in a what-if run.
func TestAdviceDecodes(t *testing.T) {
	c, err := analysis.Load(bundletest.H200(t, "gpu-bound"))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := analysis.RunScripts(context.Background(), analysis.NewSession(c, analysis.Options{Timeout: analysis.DefaultTimeout}), []string{"bottleneck"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range tabs {
		if tab.Name == "advice" {
			rows, err := ParseAdvice(tab, "gpu-bound")
			if err != nil || len(rows) != 3 || rows[1].Knob != "prefill_batch" || rows[1].To == nil || *rows[1].To != 2 || rows[1].Coverage == nil {
				t.Errorf("bundle.WhatIfAdvice: %+v (%v)", rows, err)
			}
			return
		}
	}
	t.Error("the bottleneck analysis of gpu-bound emitted no advice table")
}

func TestJoinCommandSplitsBack(t *testing.T) {
	argv := []string{"python3", "a b.py", "--x", "it's", "--y=$HOME", ""}
	got, err := SplitCommand(JoinCommand(argv))
	if err != nil || strings.Join(got, "|") != strings.Join(argv, "|") {
		t.Errorf("%q → %q → %q (%v)", argv, JoinCommand(argv), got, err)
	}
}

// TestSessionsCheckTheirOut: Run, sensitivity and what-if refuse an --out
// that holds their record (checkOut) before anything runs, unless
// --overwrite; a what-if dry run writes nothing and so is not refused.
func TestSessionsCheckTheirOut(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{File, bundle.WhatIfFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkOut("", File, "runbook", false); !errors.Is(err, capture.ErrInvalidConfig) || err.Error() != "invalid configuration: --out is required" {
		t.Errorf("no --out: %v", err)
	}
	if err := checkOut(dir, File, "runbook", false); !errors.Is(err, bundle.ErrExists) || !strings.HasSuffix(err.Error(), dir+" already holds a runbook (use --overwrite to replace it)") {
		t.Errorf("a runbook there: %v", err)
	}
	if err := checkOut(dir, File, "runbook", true); err != nil {
		t.Errorf("--overwrite: %v", err)
	}
	if err := checkOut(dir, "none.json", "runbook", false); err != nil {
		t.Errorf("nothing there: %v", err)
	}
	srv := ServerCmd{Command: "true", Argv: []string{"true"}}
	sc := SensitivityConfig{Server: srv, Allotments: []float64{1, 0.5}, Cycles: 1}
	sc.Runbook.Capture.Concurrency, sc.Runbook.Capture.Out = []int{1}, dir
	if _, err := Sensitivity(context.Background(), sc, io.Discard, io.Discard); !errors.Is(err, bundle.ErrExists) {
		t.Errorf("sensitivity into a runbook's --out: %v", err)
	}
	noAdvice := errors.New("no advice here")
	wc := WhatIfConfig{Server: srv, Rounds: 1, Bundle: dir, Advice: func(context.Context, string) (*table.Table, error) { return nil, noAdvice }}
	wc.Runbook.Capture.Out = dir
	if _, err := WhatIf(context.Background(), wc, io.Discard, io.Discard); !errors.Is(err, bundle.ErrExists) {
		t.Errorf("what-if into a what-if's --out: %v", err)
	}
	wc.DryRun = true
	if _, err := WhatIf(context.Background(), wc, io.Discard, io.Discard); !errors.Is(err, noAdvice) {
		t.Errorf("a dry run gets past the check to the advice: %v", err)
	}
}
