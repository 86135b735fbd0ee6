package capture_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/internal/audiotest"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
)

// makeDataset writes n one-second 16 kHz WAV files and a JSONL manifest
// whose transcripts are fakeasr.DefaultText.
func makeDataset(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var m strings.Builder
	samples := make([]int16, 16000)
	for i := range samples {
		samples[i] = int16((i * 37) % 2000)
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("utt%03d.wav", i)
		if err := os.WriteFile(filepath.Join(dir, name), audiotest.WAV16(16000, 1, samples...), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&m, `{"id":"utt%03d","audio":%q,"text":%q,"lang":"en"}`+"\n", i, name, fakeasr.DefaultText)
	}
	p := filepath.Join(dir, "manifest.jsonl")
	if err := os.WriteFile(p, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func baseConfig(t *testing.T, target, ds string) capture.Config {
	return capture.Config{
		Target: target, Dataset: ds, Protocol: "openai", Lang: "en",
		Concurrency: []int{2}, Arrivals: load.Constant, Repeats: 1,
		Timeout: 5 * time.Second, Grace: time.Second, ReadyTimeout: time.Second,
		Out: filepath.Join(t.TempDir(), "bundle"), Format: "table", Quiet: true,
		Probes: []string{"none"}, OTLPHTTP: "127.0.0.1:0", OTLPGRPC: "off", SpanGrace: time.Second,
	}
}

// runCapture runs a capture that prints the default analyses at its end,
// as asrprof capture does.
func runCapture(t *testing.T, ctx context.Context, cfg capture.Config) (*capture.Outcome, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	o, err := capture.New(cfg, &out, &errb).OnFinish(defaultTables).Run(ctx)
	return o, out.String() + errb.String(), err
}

func defaultTables(ctx context.Context, dir string, tables bool) capture.Finished {
	var f capture.Finished
	if tables {
		c, err := analysis.Load(dir)
		if err != nil {
			f.TablesErr = err
			return f
		}
		o := analysis.Options{Timeout: analysis.DefaultTimeout}
		f.Tables, f.TablesErr = analysis.RunScripts(ctx, analysis.NewSession(c, o), analysis.DefaultScriptsFor(c, o))
	}
	return f
}

func TestCaptureSweep(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 5 * time.Millisecond})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 6))
	cfg.Concurrency = []int{1, 3}
	cfg.Repeats = 2
	cfg.Warmup = true
	o, out, err := runCapture(t, context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "c=3") || !strings.Contains(out, "12/12") {
		t.Errorf("sweep table missing rows:\n%s", out)
	}
	b, err := bundle.Open(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Manifest.Complete || b.Manifest.Fingerprint.DatasetSHA256 == "" || b.Manifest.Fingerprint.TargetModels == nil {
		t.Errorf("manifest: complete=%v fingerprint=%+v", b.Manifest.Complete, b.Manifest.Fingerprint)
	}
	rec, _ := cfg.Record()
	rec["model"] = fakeasr.DefaultModel // the one model /v1/models lists, which the requests named
	if !reflect.DeepEqual(jsonOf(t, b.Manifest.Config), jsonOf(t, rec)) {
		t.Errorf("manifest config %v, want the configuration's record %v", b.Manifest.Config, rec)
	}
	if len(b.Manifest.Levels) != 6 { // 2 levels × (warmup + 2 repeats)
		t.Errorf("%d passes recorded, want 6", len(b.Manifest.Levels))
	}
	reqs, _ := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if len(reqs) != 36 {
		t.Fatalf("%d requests, want 36", len(reqs))
	}
	warm := 0
	sent := map[string]fakeasr.Request{}
	for _, r := range srv.Requests() {
		sent[r.RequestID] = r
	}
	for _, r := range reqs {
		if r.Warmup {
			warm++
			if r.Scored {
				t.Error("a warmup request was scored")
			}
		}
		s, ok := sent[r.RequestID]
		if !ok || !strings.Contains(s.TraceParent, r.TraceID) || r.ServerRequestID != r.RequestID {
			t.Errorf("request %s: trace/request ids not as sent (%+v)", r.RequestID, s)
		}
		if r.StartUnixNs == 0 || r.EndUnixNs < r.StartUnixNs || r.LatencyS <= 0 || r.AudioDurationS != 1 {
			t.Errorf("bad timing: %+v", r)
		}
	}
	if warm != 12 {
		t.Errorf("%d warmup requests, want 12", warm)
	}
	// Readers recompute the very numbers of results.json from the bundle
	// (capture.passes, show of a killed capture).
	got := model.Results{Schema: model.Schema, Results: summary.Levels(summary.Passes(reqs, b.Manifest.Levels, summary.SLO{}))}
	if !reflect.DeepEqual(got, o.Results) {
		t.Errorf("results recomputed from the bundle:\n%+v\nwant the capture's\n%+v", got, o.Results)
	}
	res := o.Results.Results
	if len(res) != 2 || res[1].Concurrency != 3 || res[1].Repeats != 2 || res[1].Total != 12 || res[1].Evaluated != 12 {
		t.Fatalf("results: %+v", res)
	}
	if res[0].CorpusWER.Mean != 0 || res[0].LatencyMeanS.N != 2 || res[0].RTFx.Mean <= 0 {
		t.Errorf("level c1: %+v", res[0])
	}
}

// jsonOf is v through JSON, for comparing decoded and built documents.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCaptureFailuresDoNotStopTheRun(t *testing.T) {
	fails := map[int]fakeasr.Failure{
		1: fakeasr.Status(404), 2: fakeasr.Status(500), 3: fakeasr.Reset,
		4: fakeasr.MalformedJSON, 5: fakeasr.Hang,
	}
	srv := fakeasr.NewServer(t, fakeasr.Config{Fail: fakeasr.FailOn(fails)})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 8))
	cfg.Concurrency = []int{1}
	cfg.Timeout = 300 * time.Millisecond
	o, out, err := runCapture(t, context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cov := o.Manifest.Coverage
	want := map[string]int{model.FailHTTP4xx: 1, model.FailHTTP5xx: 1, model.FailConnection: 1, model.FailMalformed: 1, model.FailTimeout: 1}
	for k, v := range want {
		if cov.FailureKinds[k] != v {
			t.Errorf("failure kind %s: %d, want %d (all: %v)", k, cov.FailureKinds[k], v, cov.FailureKinds)
		}
	}
	if cov.Total != 8 || cov.Failed != 5 || cov.Evaluated != 3 || cov.Skipped != 5 || o.Manifest.Complete || !o.Manifest.Finished {
		t.Errorf("coverage %+v complete=%v finished=%v", cov, o.Manifest.Complete, o.Manifest.Finished)
	}
	// results.json: skipped = total − evaluated at the level and the
	// repeat, as SGLang-Omni writes it, failed beside it.
	lr := o.Results.Results[0]
	if lr.Skipped != 5 || lr.Failed != 5 || lr.Total != 8 || lr.PerRepeat[0].Coverage.Skipped != 5 {
		t.Errorf("results.json level %+v, repeat coverage %+v", lr, lr.PerRepeat[0].Coverage)
	}
	if len(o.Manifest.Incomplete) != 1 || !strings.Contains(o.Manifest.Incomplete[0], "c1 repeat 1: evaluated 3 of 8, 5 skipped: 5 failed (connection 1, http_4xx 1") {
		t.Errorf("incomplete reasons: %q", o.Manifest.Incomplete)
	}
	if !strings.Contains(out, "3/8") || !strings.Contains(out, "INCOMPLETE") {
		t.Errorf("table should show 3/8 completed:\n%s", out)
	}
}

func TestCaptureStreamingDialects(t *testing.T) {
	for _, dialect := range []string{"sglang", "vllm"} {
		t.Run(dialect, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{Dialect: dialect, ChunkDelay: 2 * time.Millisecond})
			cfg := baseConfig(t, srv.URL, makeDataset(t, 3))
			cfg.Protocol = "openai-stream"
			o, out, err := runCapture(t, context.Background(), cfg)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			pr := o.Results.Results[0].PerRepeat[0]
			if pr.TTFTMeanS == nil || *pr.TTFTMeanS <= 0 || pr.ChunkGapMeanS == nil || pr.CorpusWER != 0 {
				t.Errorf("streaming metrics: %+v", pr)
			}
			for _, r := range srv.Requests() {
				if !r.Stream {
					t.Error("stream=true not sent")
				}
			}
		})
	}
}

func TestTargetUnreachableSendsNothing(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	url := srv.URL
	srv.Close()
	cfg := baseConfig(t, url, makeDataset(t, 2))
	_, _, err := runCapture(t, context.Background(), cfg)
	if !errors.Is(err, capture.ErrTargetUnreachable) {
		t.Fatalf("err = %v, want ErrTargetUnreachable", err)
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) {
		t.Errorf("a bundle was created for an unreachable target")
	}
}

func TestPreflightStopsOrSkips(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	ds := makeDataset(t, 3)
	f, _ := os.OpenFile(ds, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintln(f, `{"id":"gone","audio":"missing.wav","text":"x"}`)
	f.Close()
	os.WriteFile(filepath.Join(filepath.Dir(ds), "utt001.wav"), []byte("RIFF\x00\x00"), 0o644)

	cfg := baseConfig(t, srv.URL, ds)
	_, out, err := runCapture(t, context.Background(), cfg)
	if !errors.Is(err, capture.ErrBadInput) || srv.Count() != 0 {
		t.Fatalf("err = %v after %d requests, want ErrBadInput before any", err, srv.Count())
	}
	if !strings.Contains(out, "missing.wav") || !strings.Contains(out, "utt001.wav") {
		t.Errorf("bad entries not named:\n%s", out)
	}
	cfg.SkipBad = true
	o, out, err := runCapture(t, context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if o.Manifest.Coverage.BadInput != 2 || o.Manifest.Coverage.Total != 2 {
		t.Errorf("coverage %+v, want 2 bad_input and 2 sent", o.Manifest.Coverage)
	}
}

func TestInterruptFinalizesIncomplete(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 50 * time.Millisecond})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 40))
	cfg.Concurrency = []int{2}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	o, _, err := runCapture(t, ctx, cfg)
	if !errors.Is(err, capture.ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	b, err := bundle.Open(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if b.Manifest.Complete || !b.Manifest.Interrupted || len(reqs) == 0 || len(reqs) >= 40 {
		t.Errorf("complete=%v interrupted=%v requests=%d", b.Manifest.Complete, b.Manifest.Interrupted, len(reqs))
	}
	if o == nil || len(reqs) != srv.Count() {
		t.Errorf("%d records for %d requests the server saw", len(reqs), srv.Count())
	}
}

// A server that slows down after its 5th request: the closed loop at
// concurrency 1 sees only the service time, the open loop also sees the
// queue that builds behind it.
func TestOpenLoopShowsQueueing(t *testing.T) {
	mk := func() *fakeasr.Server {
		return fakeasr.NewServer(t, fakeasr.Config{Capacity: 1, Delay: 5 * time.Millisecond, SlowAfter: 5, SlowDelay: 40 * time.Millisecond})
	}
	ds := makeDataset(t, 20)
	closed := baseConfig(t, mk().URL, ds)
	closed.Concurrency = []int{1}
	oc, out, err := runCapture(t, context.Background(), closed)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	open := baseConfig(t, mk().URL, ds)
	open.Concurrency = nil
	open.Rates = []float64{50} // one every 20 ms into a 40 ms server
	oo, out, err := runCapture(t, context.Background(), open)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cp95 := oc.Results.Results[0].LatencyP95S.Mean
	op95 := oo.Results.Results[0].LatencyP95S.Mean
	if cp95 > 0.15 {
		t.Errorf("closed loop p95 %.3fs, want ≈0.04s", cp95)
	}
	if op95 < 1.5*cp95 || op95 < 0.2 {
		t.Errorf("open loop p95 %.3fs vs closed %.3fs: the queue does not show", op95, cp95)
	}
}

// The probes run beside the driver: with the fake server inside this test
// process, --pid auto finds this process, and the sched probe (or its /proc
// fallback where eBPF is not allowed) writes per-thread rows for each pass.
func TestCaptureRunsProbes(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 2 * time.Millisecond})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 10))
	cfg.Probes = []string{"auto"}
	cfg.ProcHz = 20
	o, out, err := runCapture(t, context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if pid := o.Manifest.Extra["target_pid"]; pid != os.Getpid() {
		t.Fatalf("target pid %v, want this process %d\n%s", pid, os.Getpid(), out)
	}
	status := o.Manifest.Extra["probes"].(map[string]string)
	if status["sched"] != "on" && status["proc"] != "on" {
		t.Fatalf("neither sched nor proc ran: %v", status)
	}
	n := 0
	if _, err := bundle.ReadJSONL(filepath.Join(cfg.Out, bundle.SchedFile), func(r map[string]any) error {
		if r["level"] == "c2" && r["tid"] != nil {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("sched.jsonl has no per-thread rows for level c2")
	}
}

// activityFake is a fake probe marked activity-driven (its records would
// be the target's own doings, as the cpu probe's samples).
type activityFake struct {
	*Fake
	rate float64
}

func (f activityFake) ActivityRate() float64 { return f.rate }

// startChild starts a process for the capture to target, killed when the
// test ends.
func startChild(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// An activity-driven probe that records nothing is not a failure when the
// target hardly ran in the pass (an idle server: nothing to sample); said
// as a note, kept as extra.probe_idle, and the capture stays complete.
// The same probe beside a target that used its CPU is a failure, unless
// its rate is so low that a working probe would often record nothing in
// that CPU time (2 records a CPU second: 3.5 s needed, where the pass
// takes well under 1 s).
func TestActivityProbeEmptyOnIdleTarget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target []string
		rate   float64
		idle   bool
	}{
		{"idle", []string{"sleep", "60"}, 0, true},
		{"busy", []string{"sh", "-c", "while :; do :; done"}, 0, false},
		{"busy_fast_sampler", []string{"sh", "-c", "while :; do :; done"}, 1000, false},
		{"busy_slow_sampler", []string{"sh", "-c", "while :; do :; done"}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 50 * time.Millisecond})
			cfg := baseConfig(t, srv.URL, makeDataset(t, 4))
			cfg.PID = startChild(t, tc.target[0], tc.target[1:]...)
			samples := activityFake{&Fake{ProbeName: "samples", File: "samples.jsonl"}, tc.rate}
			var out, errb bytes.Buffer
			o, err := capture.New(cfg, &out, &errb).AddProbes(samples).Run(context.Background())
			if err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			failed := strings.Contains(errb.String(), "ERROR: probe samples was on but recorded nothing")
			noted := strings.Contains(errb.String(), "probe samples recorded nothing in 1 of 1 scored passes (c=2 repeat 1 (") &&
				strings.Contains(errb.String(), "an idle server, not a failure")
			idle, _ := o.Manifest.Extra["probe_idle"].(map[string][]string)
			if tc.idle {
				if failed || !noted || len(idle["samples"]) != 1 || !o.Manifest.Complete {
					t.Errorf("idle target: failed %v noted %v probe_idle %v complete %v\n%s", failed, noted, idle, o.Manifest.Complete, errb.String())
				}
			} else if !failed || noted || len(idle) != 0 || o.Manifest.Complete {
				t.Errorf("busy target: failed %v noted %v probe_idle %v complete %v\n%s", failed, noted, idle, o.Manifest.Complete, errb.String())
			}
		})
	}
}

// A probe that is on and records nothing in a scored pass is a failure:
// said at the end of the capture and kept in the manifest; a probe that
// records is not named.
func TestProbeOnButEmptyIsReported(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 3))
	cfg.Repeats, cfg.Warmup = 2, true
	silent := &Fake{ProbeName: "silent", File: "silent.jsonl"}
	busy := &Fake{ProbeName: "busy", File: "busy.jsonl", Records: 2}
	var out, errb bytes.Buffer
	o, err := capture.New(cfg, &out, &errb).AddProbes(silent, busy).Run(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "ERROR: probe silent was on but recorded nothing in 2 of 2 scored passes (c=2 repeat 1, c=2 repeat 2)") {
		t.Errorf("stderr does not report the silent probe:\n%s", errb.String())
	}
	if strings.Contains(errb.String(), "probe busy was on but") {
		t.Errorf("a probe that recorded is reported as empty:\n%s", errb.String())
	}
	empty, _ := o.Manifest.Extra["probe_empty"].(map[string][]string)
	if len(empty) != 1 || len(empty["silent"]) != 2 {
		t.Errorf("manifest extra.probe_empty = %v, want silent's two scored passes", o.Manifest.Extra["probe_empty"])
	}
	if o.Manifest.Complete || !slices.ContainsFunc(o.Manifest.Incomplete, func(s string) bool { return strings.Contains(s, "probe silent") }) {
		t.Errorf("manifest complete=%v incomplete=%q, want incomplete naming the silent probe", o.Manifest.Complete, o.Manifest.Incomplete)
	}
	// What was saved, read back as a user's script would.
	raw, err := os.ReadFile(filepath.Join(cfg.Out, bundle.ManifestFile))
	if err != nil || !strings.Contains(string(raw), `"probe_empty"`) {
		t.Errorf("manifest.json lacks probe_empty (%v)", err)
	}
}
