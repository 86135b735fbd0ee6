package runbook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/guard"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/probe"
)

func TestMain(m *testing.M) {
	fakeasr.Main()
	os.Exit(m.Run())
}

// makeDataset writes n half-second WAVs and a manifest whose transcripts
// are what the fake server answers.
func makeDataset(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var m strings.Builder
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("u%d.wav", i)
		if err := os.WriteFile(filepath.Join(dir, name), audiotest.WAV16(16000, 1, make([]int16, 8000)...), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&m, "{\"id\":\"u%d\",\"audio\":%q,\"text\":%q}\n", i, name, fakeasr.DefaultText)
	}
	p := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(p, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gpusFree is a GPUReader whose one GPU uses usedMiB[i] at the i-th read
// (the last value repeats).
type gpusFree struct {
	usedMiB []uint64
	reads   int
}

func (g *gpusFree) GPUs(context.Context) ([]GPU, error) {
	i := min(g.reads, len(g.usedMiB)-1)
	g.reads++
	return []GPU{{Index: 0, Name: "fake", UsedMiB: g.usedMiB[i], TotalMiB: 80000}}, nil
}

type noGPU struct{}

func (noGPU) GPUs(context.Context) ([]GPU, error) {
	return nil, fmt.Errorf("no NVML (fake): %w", probe.ErrNotSupported)
}

func testConfig(t *testing.T, port int, plan []RunSpec) Config {
	t.Helper()
	return Config{
		Capture: capture.Config{
			Target: fmt.Sprintf("http://127.0.0.1:%d", port), Dataset: makeDataset(t, 3),
			Protocol: "openai", Lang: "en", Concurrency: []int{1}, Arrivals: load.Constant, Repeats: 1,
			Timeout: 5 * time.Second, Grace: time.Second, ReadyTimeout: 2 * time.Second,
			Out: filepath.Join(t.TempDir(), "out"), Format: "table", Quiet: true,
			Probes: []string{"none"}, OTLPHTTP: "127.0.0.1:0", OTLPGRPC: "off", SpanGrace: 100 * time.Millisecond,
		},
		Lifecycle: Lifecycle{StartupTimeout: 20 * time.Second, StopGrace: 2 * time.Second, GPUFreeMiB: 1024, GPUFreeTimeout: time.Second},
		Plan:      plan,
		GPUs:      &gpusFree{usedMiB: []uint64{0}},
		GPUPoll:   10 * time.Millisecond,
	}
}

func fakeServer(o fakeasr.ProcessOptions) ServerCmd {
	argv := fakeasr.Command(o)
	return ServerCmd{Command: strings.Join(argv, " "), Argv: argv}
}

func runbookRun(t *testing.T, cfg Config) (*Report, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	rep, err := Run(context.Background(), cfg, &out, &errb)
	return rep, out.String() + "\n--- stderr ---\n" + errb.String(), err
}

func TestRunsFreshServerPerRun(t *testing.T) {
	port := fakeasr.FreePort(t)
	plan, err := ParseRuns("warm,1,2", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK}))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, port, plan)
	cache := t.TempDir()
	if err := os.WriteFile(filepath.Join(cache, "kernel.bin"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.CacheDirs = []string{cache}
	cfg.Capture.SaveRawDir = filepath.Join(t.TempDir(), "raw")
	cfg.ProvenanceEnv = []string{"RUNBOOK_TEST_*"}
	cfg.Env = append(os.Environ(), "RUNBOOK_TEST_KNOB=7")
	rep, out, err := runbookRun(t, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !rep.Verdict.Complete || rep.Verdict.Scored != 2 {
		t.Fatalf("verdict %+v\n%s", rep.Verdict, out)
	}
	pids := map[int]bool{}
	for _, r := range rep.Runs {
		pids[r.PID] = true
		dir := filepath.Join(cfg.Capture.Out, r.Dir)
		b, err := bundle.Open(dir)
		if err != nil {
			t.Fatalf("%s: %v", r.Dir, err)
		}
		if !b.Manifest.Complete {
			t.Errorf("%s: manifest incomplete", r.Dir)
		}
		// Each run's raw per-sample records apart, under its name.
		if raw, err := os.ReadFile(filepath.Join(cfg.Capture.SaveRawDir, r.Dir, "conc1_rep1.jsonl")); err != nil || bytes.Count(raw, []byte("\n")) != 3 {
			t.Errorf("%s: raw records %q, %v", r.Dir, raw, err)
		}
		if got := b.Manifest.Config["pid"]; fmt.Sprint(got) != strconv.Itoa(r.PID) {
			t.Errorf("%s: capture was given pid %v, want the server's %d", r.Dir, got, r.PID)
		}
		log, err := os.ReadFile(filepath.Join(dir, LogFile))
		if err != nil || !strings.Contains(string(log), fmt.Sprintf("fake server pid %d", r.PID)) {
			t.Errorf("%s: server.log does not hold the server's output: %q %v", r.Dir, log, err)
		}
		if !fakeasr.Gone(r.PID) {
			t.Errorf("%s: server %d still runs", r.Dir, r.PID)
		}
		p := r.Provenance
		if p == nil || p.Env["RUNBOOK_TEST_KNOB"] != "7" || p.Executable == nil || len(p.Executable.SHA256) != 64 || p.CPUs == "" {
			t.Errorf("%s: provenance %+v", r.Dir, p)
		} else if len(p.Caches) != 1 || !p.Caches[0].Exists || p.Caches[0].Bytes != 5 || p.Caches[0].Newest.IsZero() {
			t.Errorf("%s: cache state %+v", r.Dir, p.Caches)
		}
	}
	if len(pids) != 3 {
		t.Errorf("pids %v: want 3 different servers", pids)
	}
	if rep.Runs[0].Scored || !rep.Runs[1].Scored || rep.Runs[0].Dir != "run-warm" {
		t.Errorf("runs %+v", rep.Runs)
	}
	var lat *MetricSummary
	for i, s := range rep.Summary {
		if s.Level == "c1" && s.Metric == "latency_mean_s" {
			lat = &rep.Summary[i]
		}
	}
	if lat == nil || lat.N != 2 || lat.Mean <= 0 || lat.Min > lat.Mean || lat.Max < lat.Mean || strings.Join(lat.Runs, ",") != "run-1,run-2" {
		t.Errorf("latency summary %+v", lat)
	}
	for _, want := range []string{"latency mean (s)", "Verdict: complete", "run-warm"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var disk Report
	b, err := os.ReadFile(filepath.Join(cfg.Capture.Out, File))
	if err != nil || json.Unmarshal(b, &disk) != nil || !disk.Verdict.Complete || len(disk.Runs) != 3 || len(disk.Summary) == 0 {
		t.Errorf("runbook.json: %v\n%s", err, b)
	}
	// A second runbook into the same --out is refused without --overwrite.
	if _, _, err := runbookRun(t, cfg); !errors.Is(err, bundle.ErrExists) {
		t.Errorf("second run into the same --out: %v, want ErrExists", err)
	}
}

// A guard that cannot start is said, on the progress and in the run's
// notes: the server then runs unguarded.
func TestGuardThatDidNotStart(t *testing.T) {
	defer func(f func() (string, error)) { guard.Exe = f }(guard.Exe)
	guard.Exe = func() (string, error) { return "", errors.New("no executable (test)") }
	port := fakeasr.FreePort(t)
	plan, _ := ParseRuns("1", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK}))
	cfg := testConfig(t, port, plan)
	cfg.Capture.Quiet = false // the progress
	rep, out, err := runbookRun(t, cfg)
	const want = "its guard did not start (no executable (test)): if asrprof is killed, the server keeps running"
	if err != nil || rep == nil || len(rep.Runs) != 1 || !slices.Contains(rep.Runs[0].Notes, want) || !strings.Contains(out, want) {
		t.Fatalf("err %v; want the note %q in the run and the progress\n%+v\n%s", err, want, rep, out)
	}
}

func TestServerExitsDuringStartup(t *testing.T) {
	port := fakeasr.FreePort(t)
	const key = "startup-key-77"
	plan, _ := ParseRuns("warm,1", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessExit, APIKey: key}))
	cfg := testConfig(t, port, plan)
	cfg.Lifecycle.StartupTimeout = time.Minute
	start := time.Now()
	rep, out, err := runbookRun(t, cfg)
	if !errors.Is(err, ErrServerExited) {
		t.Fatalf("err = %v, want ErrServerExited\n%s", err, out)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %s: the wait did not stop when the server exited", d)
	}
	if !strings.Contains(err.Error(), "CUDA out of memory (fake)") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("error lacks the log tail or exit status: %v", err)
	}
	if strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "api_key") {
		t.Errorf("the log tail in the error keeps the server's key, or lacks its line: %v", err)
	}
	if rep == nil || rep.Verdict.Complete || len(rep.Runs) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(out, "run-1") || !strings.Contains(out, "not run") {
		t.Errorf("verdict does not name the run that did not happen:\n%s", out)
	}
}

func TestServerNeverHealthy(t *testing.T) {
	port := fakeasr.FreePort(t)
	plan, _ := ParseRuns("1", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessUnhealthy}))
	cfg := testConfig(t, port, plan)
	cfg.Lifecycle.StartupTimeout = time.Second
	start := time.Now()
	rep, out, err := runbookRun(t, cfg)
	if !errors.Is(err, ErrStartupTimeout) {
		t.Fatalf("err = %v, want ErrStartupTimeout\n%s", err, out)
	}
	// A 1 s start-up timeout, then the server stopped and its log read:
	// measured 1.06–2.44 s here under a load average of 8. Under 6 s: it
	// stopped waiting at its timeout, not at some longer default.
	t.Logf("took %s", time.Since(start))
	if d := time.Since(start); d < time.Second || d > 6*time.Second {
		t.Errorf("took %s for a 1 s start-up timeout", d)
	}
	if !strings.Contains(err.Error(), "HTTP 503") || !strings.Contains(err.Error(), "listening on") {
		t.Errorf("error lacks the last answer or the log tail: %v", err)
	}
	if pid := rep.Runs[0].PID; pid == 0 || !fakeasr.Gone(pid) {
		t.Errorf("the unhealthy server (pid %d) was not stopped", pid)
	}
}

func TestPortTaken(t *testing.T) {
	busy := fakeasr.NewServer(t, fakeasr.Config{})
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(busy.URL, "http://"))
	port, _ := strconv.Atoi(portStr)
	plan, _ := ParseRuns("1", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK}))
	cfg := testConfig(t, port, plan)
	rep, out, err := runbookRun(t, cfg)
	if !errors.Is(err, ErrPortBusy) {
		t.Fatalf("err = %v, want ErrPortBusy\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(cfg.Capture.Out, "run-1", LogFile)); err == nil {
		t.Error("a server was started although the port was taken")
	}
	if rep.Verdict.Complete || busy.Count() != 0 {
		t.Errorf("verdict %+v, %d requests reached the busy server", rep.Verdict, busy.Count())
	}

	cfg.Capture.Out = filepath.Join(t.TempDir(), "reuse")
	cfg.Lifecycle.Reuse = true
	rep, out, err = runbookRun(t, cfg)
	if err != nil {
		t.Fatalf("--reuse-server: %v\n%s", err, out)
	}
	if !rep.Runs[0].Reused || rep.Runs[0].PID != os.Getpid() || busy.Count() != 3 || !rep.Verdict.Complete {
		t.Errorf("reuse: run %+v, %d requests", rep.Runs[0], busy.Count())
	}
}

func TestStopKillsTheWholeGroup(t *testing.T) {
	port := fakeasr.FreePort(t)
	childFile := filepath.Join(t.TempDir(), "child.pid")
	plan, _ := ParseRuns("1", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessChild, ChildPIDFile: childFile}))
	cfg := testConfig(t, port, plan)
	cfg.Lifecycle.StopGrace = 300 * time.Millisecond
	rep, out, err := runbookRun(t, cfg)
	b, rerr := os.ReadFile(childFile)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if child > 0 {
		t.Cleanup(func() { fakeasr.Kill(child) })
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rerr != nil || child == 0 {
		t.Fatalf("the fake server wrote no child pid: %v", rerr)
	}
	if !fakeasr.Gone(child) {
		t.Errorf("child %d (ignores SIGTERM) survived the stop", child)
	}
	if !fakeasr.Gone(rep.Runs[0].PID) {
		t.Errorf("server %d survived the stop", rep.Runs[0].PID)
	}
}

func TestFailedRequestMakesTheVerdictIncomplete(t *testing.T) {
	port := fakeasr.FreePort(t)
	counter := filepath.Join(t.TempDir(), "starts")
	// Starts: warm (1), run-1 (2), run-2 (3): run-2's first request fails.
	plan, _ := ParseRuns("warm,1,2", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK, CounterFile: counter, FailStart: 3}))
	cfg := testConfig(t, port, plan)
	rep, out, err := runbookRun(t, cfg)
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("err = %v, want ErrIncomplete\n%s", err, out)
	}
	if rep.Verdict.Complete || len(rep.Verdict.Gaps) != 1 {
		t.Fatalf("verdict %+v", rep.Verdict)
	}
	g := rep.Verdict.Gaps[0]
	if g.Run != "run-2" || g.Level != "c1" || g.Repeat != 1 || !strings.Contains(g.What, "evaluated 2 of 3") || !strings.Contains(g.What, "http_5xx 1") {
		t.Errorf("gap %+v", g)
	}
	stdout, _, _ := strings.Cut(out, "--- stderr ---")
	if !strings.Contains(stdout, "INCOMPLETE") || !strings.Contains(stdout, "run-2") || strings.Contains(stdout, "latency mean (s)") {
		t.Errorf("an incomplete verdict must list the gap instead of the means:\n%s", out)
	}
}

func TestAB(t *testing.T) {
	port := fakeasr.FreePort(t)
	a := fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK})
	b := a
	b.Argv = append([]string{"env", "RUNBOOK_SIDE=b"}, a.Argv...)
	b.Command = strings.Join(b.Argv, " ")
	plan, err := ABPlan("ABBA", true, a, b)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, port, plan)
	rep, out, err := runbookRun(t, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var dirs []string
	for _, r := range rep.Runs {
		dirs = append(dirs, r.Dir)
	}
	if got := strings.Join(dirs, ","); got != "A-warm,B-warm,A-1,B-1,B-2,A-2" {
		t.Errorf("runs %s", got)
	}
	if rep.Mode != "ab" || len(rep.Compare) != len(summary.Metrics(false)) {
		t.Fatalf("mode %s, %d comparisons", rep.Mode, len(rep.Compare))
	}
	c := rep.Compare[0]
	if len(c.A) != 2 || len(c.B) != 2 || c.P <= 0 || c.Sig {
		t.Errorf("comparison %+v (2 runs a side can never be significant)", c)
	}
	if !strings.Contains(out, "B/A") || !strings.Contains(out, "~") || !strings.Contains(out, "A and B differ in command") ||
		!strings.Contains(out, "with 2 and 2 runs a side, the smallest p a Mann-Whitney U test can give is 0.333") {
		t.Errorf("output:\n%s", out)
	}
}

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"python3 serve.py --port 8000", []string{"python3", "serve.py", "--port", "8000"}, ""},
		{`sh -c 'echo $HOME; exec srv'`, []string{"sh", "-c", "echo $HOME; exec srv"}, ""},
		{`a "b c" d\ e "x\"y" ''`, []string{"a", "b c", "d e", `x"y`, ""}, ""},
		{"srv \\\n  --flag", []string{"srv", "--flag"}, ""},
		{"srv | tee log", nil, "shell syntax"},
		{"srv $PORT", nil, "shell syntax"},
		{"CUDA_VISIBLE_DEVICES=0 srv", nil, "variable assignment"},
		{"env CUDA_VISIBLE_DEVICES=0 srv", []string{"env", "CUDA_VISIBLE_DEVICES=0", "srv"}, ""},
		{`srv "open`, nil, "unterminated"},
		{"   ", nil, "empty"},
	} {
		got, err := SplitCommand(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrBadCommand) {
				t.Errorf("SplitCommand(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestReadCommandFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cmd")
	os.WriteFile(p, []byte("# the server\npython3 -m srv \\\n  --port 8000\n"), 0o644)
	_, argv, err := ReadCommandFile(p)
	if err != nil || strings.Join(argv, " ") != "python3 -m srv --port 8000" {
		t.Errorf("argv %q, %v", argv, err)
	}
}

func TestPlans(t *testing.T) {
	if _, err := ParseRuns("warm", ServerCmd{}); !errors.Is(err, ErrBadPlan) {
		t.Errorf("a plan of only warm runs: %v", err)
	}
	if _, err := ParseRuns("1,1", ServerCmd{}); !errors.Is(err, ErrBadPlan) {
		t.Errorf("duplicate runs: %v", err)
	}
	if _, err := ABPlan("AAC", true, ServerCmd{}, ServerCmd{}); !errors.Is(err, ErrBadPlan) {
		t.Errorf("order AAC: %v", err)
	}
	if _, err := ABPlan("AAA", true, ServerCmd{}, ServerCmd{}); !errors.Is(err, ErrBadPlan) {
		t.Errorf("order without B: %v", err)
	}
	p, err := ABPlan("ABBAAB", false, ServerCmd{Command: "a"}, ServerCmd{Command: "b"})
	var got []string
	for _, r := range p {
		got = append(got, r.Dir+"="+r.Server.Command)
	}
	if err != nil || strings.Join(got, ",") != "A-1=a,B-1=b,B-2=b,A-2=a,A-3=a,B-3=b" {
		t.Errorf("ABBAAB: %v %v", got, err)
	}
}

func TestWaitGPUFree(t *testing.T) {
	ctx := context.Background()
	g := &gpusFree{usedMiB: []uint64{70000, 30000, 500}}
	got, err := WaitGPUFree(ctx, g, 1024, 5*time.Second, time.Millisecond)
	if err != nil || g.reads != 3 || got[0].UsedMiB != 500 {
		t.Errorf("freed: %v after %d reads (%+v)", err, g.reads, got)
	}
	start := time.Now()
	_, err = WaitGPUFree(ctx, &gpusFree{usedMiB: []uint64{5000}}, 1024, 50*time.Millisecond, 10*time.Millisecond)
	if !errors.Is(err, ErrGPUBusy) || !strings.Contains(err.Error(), "GPU 0 uses 5000 MiB") || time.Since(start) > 2*time.Second {
		t.Errorf("busy: %v", err)
	}
	if _, err := WaitGPUFree(ctx, noGPU{}, 1024, time.Hour, time.Hour); !isNotSupported(err) {
		t.Errorf("no NVML: %v", err)
	}
}

func TestRunAbortsWhenGPUStaysBusy(t *testing.T) {
	port := fakeasr.FreePort(t)
	plan, _ := ParseRuns("1,2", fakeServer(fakeasr.ProcessOptions{Port: port, Mode: fakeasr.ProcessOK}))
	cfg := testConfig(t, port, plan)
	cfg.GPUs = &gpusFree{usedMiB: []uint64{0, 9000}} // before run-1's start: free; after its stop: busy
	cfg.Lifecycle.GPUFreeTimeout = 100 * time.Millisecond
	rep, out, err := runbookRun(t, cfg)
	if !errors.Is(err, ErrGPUBusy) {
		t.Fatalf("err = %v, want ErrGPUBusy\n%s", err, out)
	}
	if len(rep.Runs) != 1 || rep.Verdict.Complete {
		t.Errorf("the plan went on after the GPU stayed busy: %d runs", len(rep.Runs))
	}

	// Busy before the first start (another job on the GPU): no server starts.
	cfg.Capture.Out = filepath.Join(t.TempDir(), "busy-before")
	cfg.GPUs = &gpusFree{usedMiB: []uint64{9000}}
	rep, out, err = runbookRun(t, cfg)
	if !errors.Is(err, ErrGPUBusy) || !strings.Contains(err.Error(), "before the start") {
		t.Fatalf("err = %v, want ErrGPUBusy before the start\n%s", err, out)
	}
	if _, serr := os.Stat(filepath.Join(cfg.Capture.Out, "run-1", LogFile)); serr == nil || rep.Runs[0].PID != 0 {
		t.Error("a server was started on a busy GPU")
	}
}

func TestJudge(t *testing.T) {
	levels := []capture.SweepPoint{{Name: "c1", Concurrency: 1}, {Name: "c8", Concurrency: 8}}
	full := model.Coverage{Total: 3, Evaluated: 3}
	lr := func(name string, covs ...model.Coverage) model.LevelResult {
		r := model.LevelResult{Level: name}
		for i, c := range covs {
			r.PerRepeat = append(r.PerRepeat, model.PassMetrics{Level: name, Repeat: i + 1, Coverage: c, LatencyMeanS: float64(i + 1)})
		}
		return r
	}
	ok := RunRecord{RunSpec: RunSpec{Dir: "run-1", Scored: true}, ran: true, Complete: true, Finished: true,
		results: model.Results{Results: []model.LevelResult{lr("c1", full, full), lr("c8", full, full)}}}
	skipped := RunRecord{RunSpec: RunSpec{Dir: "run-2", Scored: true}, ran: true, Finished: true,
		results: model.Results{Results: []model.LevelResult{lr("c1", full, model.Coverage{Total: 3, Evaluated: 2, Skipped: 1, EmptyRef: 1}), lr("c8", full)}}}
	cut := RunRecord{RunSpec: RunSpec{Dir: "run-3", Scored: true}, ran: true, Finished: false,
		results: model.Results{Results: []model.LevelResult{lr("c1", full, full)}}}
	warmBad := RunRecord{RunSpec: RunSpec{Dir: "run-warm"}, ran: true,
		results: model.Results{Results: []model.LevelResult{lr("c1", model.Coverage{Total: 3, Failed: 3})}}}
	plan := []RunSpec{{Dir: "run-warm"}, {Dir: "run-1", Scored: true}, {Dir: "run-2", Scored: true}, {Dir: "run-3", Scored: true}, {Dir: "run-4", Scored: true}}

	if v := Judge([]RunRecord{warmBad, ok}, plan[:2], levels, 2); !v.Complete || v.Scored != 1 {
		t.Errorf("a bad warm run must not count: %+v", v)
	}
	v := Judge([]RunRecord{warmBad, ok, skipped, cut}, plan, levels, 2)
	want := []Gap{
		{Run: "run-2", Level: "c1", Repeat: 2, What: "evaluated 2 of 3, 1 skipped: 1 empty normalized reference"},
		{Run: "run-2", Level: "c8", What: "1 of 2 repeats ran"},
		{Run: "run-3", What: "the capture did not finish (interrupted or killed)"},
		{Run: "run-3", Level: "c8", What: "level not run"},
		{Run: "run-4", What: "not run (the runbook stopped before it)"},
	}
	if v.Complete || !slices.Equal(v.Gaps, want) {
		t.Errorf("gaps:\n%+v\nwant:\n%+v", v.Gaps, want)
	}
	// A manifest that says incomplete for a reason the results do not show.
	odd := ok
	odd.Complete, odd.Incomplete = false, []string{"bundle write error"}
	if v := Judge([]RunRecord{odd}, plan[1:2], levels, 2); v.Complete || len(v.Gaps) != 1 || v.Gaps[0].What != "bundle write error" {
		t.Errorf("manifest-only gap: %+v", v)
	}
}

func TestSummaryStats(t *testing.T) {
	mk := func(dir, side string, lat float64) RunRecord {
		return RunRecord{RunSpec: RunSpec{Dir: dir, Side: side, Scored: true}, ran: true, results: model.Results{Results: []model.LevelResult{{
			Level: "c1", LatencyMeanS: model.Stat{Mean: lat}, PerRepeat: []model.PassMetrics{{RequestsPerS: 10 / lat, LatencyMeanS: lat}},
		}}}}
	}
	recs := []RunRecord{mk("A-1", "A", 1), mk("B-1", "B", 2), mk("A-2", "A", 1.2), mk("B-2", "B", 2.2), mk("A-3", "A", 1.1), mk("B-3", "B", 2.1),
		mk("A-4", "A", 1.05), mk("B-4", "B", 2.05)}
	levels := []capture.SweepPoint{{Name: "c1"}}
	sum := append(Summarize(recs, "A", levels), Summarize(recs, "B", levels)...)
	var lat MetricSummary
	for _, s := range sum {
		if s.Side == "B" && s.Metric == "latency_mean_s" {
			lat = s
		}
	}
	if lat.N != 4 || fmt.Sprintf("%.4f %.1f %.1f %.4f", lat.Mean, lat.Min, lat.Max, lat.StdDev) != "2.0875 2.0 2.2 0.0854" {
		t.Errorf("B latency %+v", lat)
	}
	cs := Compare(sum, summary.DefaultAlpha)
	var c summary.Comparison
	for _, x := range cs {
		if x.Metric == "latency_mean_s" {
			c = x
		}
	}
	if c.Ratio == nil || fmt.Sprintf("%.3f", *c.Ratio) != "1.920" || !c.Sig || fmt.Sprintf("%.4f", c.P) != "0.0286" {
		t.Errorf("comparison %+v", c)
	}
	if c.Level != "c1" || len(c.A) != 4 || len(c.B) != 4 {
		t.Errorf("comparison of %s: %d A and %d B values", c.Level, len(c.A), len(c.B))
	}
	// A's runs 1, 1.2, 1.1, 1.05: the A/A floor (1.2 − 1) / 1.0875
	if c.AAFloor == nil || fmt.Sprintf("%.4f", *c.AAFloor) != "0.1839" || c.BeyondFloor == nil || !*c.BeyondFloor {
		t.Errorf("A/A floor %v beyond %v, want 0.1839 and beyond", c.AAFloor, c.BeyondFloor)
	}
	tb := CompareTable(cs, summary.DefaultAlpha)
	if len(tb.Notes) != 1 || !strings.Contains(strings.Join(tb.Rows[3], " "), "+92.0 % beyond ±18.4 %") {
		t.Errorf("compare table rows %q notes %q", tb.Rows, tb.Notes)
	}
	// a change called significant (every B above every A) within the
	// floor (A differs from itself by 18 %, B by 9 %) is not resolved
	within := summary.Compare([]float64{1, 1.2, 1, 1.2}, []float64{1.21, 1.22, 1.21, 1.22}, summary.DefaultAlpha)
	within.Level, within.Metric = "c1", "latency_mean_s"
	within.JudgeFloor()
	tb = CompareTable([]summary.Comparison{within}, summary.DefaultAlpha)
	if !within.Sig || within.FloorText() != "within ±18.2 %" || len(tb.Notes) != 2 || !strings.Contains(tb.Notes[1], "sample size: c=1 latency mean (s) +10.5 % (p 0.0265): called significant, but within the A/A floor") {
		t.Errorf("within the floor: %s, notes %q", within.FloorText(), tb.Notes)
	}
	once := summary.Compare([]float64{1}, []float64{2}, summary.DefaultAlpha)
	once.JudgeFloor()
	if once.AAFloor != nil || once.FloorText() != "unmeasured" {
		t.Errorf("A ran once: floor %v (%s), want none", once.AAFloor, once.FloorText())
	}
}

func TestProvenanceHelpers(t *testing.T) {
	env := []string{"CUDA_VISIBLE_DEVICES=1", "VLLM_USE_V1=1", "HOME=/root", "MY_KNOB=3", "VLLMX=2"}
	got := SelectEnv(env, append(append([]string(nil), DefaultProvenanceEnv...), "MY_KNOB"))
	if len(got) != 3 || got["CUDA_VISIBLE_DEVICES"] != "1" || got["VLLM_USE_V1"] != "1" || got["MY_KNOB"] != "3" {
		t.Errorf("SelectEnv = %v", got)
	}
	if s := CPUList([]int{5, 0, 1, 2, 7, 8}); s != "0-2,5,7-8" {
		t.Errorf("CPUList = %s", s)
	}
	for in, want := range map[string]string{
		"#!/usr/bin/env python3\nimport x": "python3",
		"#!/venv/bin/python3.12 -u\n":      "/venv/bin/python3.12",
		"\x7fELF":                          "",
	} {
		if got := shebang([]byte(in)); got != want {
			t.Errorf("shebang(%q) = %q, want %q", in, got, want)
		}
	}
	if pythonOf(&Executable{Path: "/usr/bin/python3.12"}) != "/usr/bin/python3.12" ||
		pythonOf(&Executable{Path: "/venv/bin/sgl-omni", Interpreter: "/venv/bin/python"}) != "/venv/bin/python" ||
		pythonOf(&Executable{Path: "/usr/bin/vllm-go"}) != "" {
		t.Error("pythonOf")
	}
	if _, prog := envCommand([]string{"env", "-u", "X", "A=1", "python3", "x.py"}, nil); prog != "python3" {
		t.Error("the program through env")
	}
	// Describe on a real python, where there is one.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		p := Describe(context.Background(), "/usr/bin/python3 -c pass", []string{"/usr/bin/python3", "-c", "pass"},
			append(os.Environ(), "CUDA_VISIBLE_DEVICES=3"), DefaultProvenanceEnv, nil)
		if p.Python == nil || !strings.HasPrefix(p.Python.Version, "3.") || p.CUDAVisibleDevices == nil || *p.CUDAVisibleDevices != "3" {
			t.Errorf("Describe(python3) = %+v (python %+v)", p, p.Python)
		}
	}
	d := FingerprintDiff(&Provenance{Command: "x", Executable: &Executable{Path: "/a", SHA256: "11"}, Env: map[string]string{"K": "1"}},
		&Provenance{Command: "x", Executable: &Executable{Path: "/a", SHA256: "22"}, Env: map[string]string{}})
	if strings.Join(d, "; ") != `executable sha256: A 11, B 22; env K: A "1", B (unset)` {
		t.Errorf("FingerprintDiff = %q", d)
	}
}

func TestCommandEnv(t *testing.T) {
	base := []string{"PATH=/bin", "OMP_NUM_THREADS=8", "HOME=/root"}
	got, prog := envCommand([]string{"env", "-u", "HOME", "OMP_NUM_THREADS=1", "VLLM_X=2", "srv", "A=3"}, base)
	if strings.Join(got, " ") != "PATH=/bin OMP_NUM_THREADS=1 VLLM_X=2" || prog != "srv" {
		t.Errorf("envCommand = %q, %q", got, prog)
	}
	if got, prog := envCommand([]string{"srv", "A=1"}, base); len(got) != 3 || prog != "srv" {
		t.Errorf("no env prefix: %q, %q", got, prog)
	}
	for _, argv := range [][]string{{"env", "-i", "-C", "/tmp", "srv"}, {"env", "-", "--unset", "X", "srv"}} {
		if got, prog := envCommand(argv, base); len(got) != 0 || prog != "srv" {
			t.Errorf("envCommand(%q) = %q, %q", argv, got, prog)
		}
	}
	if _, prog := envCommand([]string{"env", "A=1", "-u"}, base); prog != "env" {
		t.Errorf("env naming no program: %q", prog)
	}
}
