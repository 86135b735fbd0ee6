package main

import (
	"encoding/json"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/score/diarize"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// diarizeCapture is the command line of a transcribe-diarize capture of
// the diarset, no probes.
func diarizeCapture(target, ds, out string, extra ...string) []string {
	return append([]string{"capture", "--target", target, "--dataset", ds, "--task", "transcribe-diarize",
		"--repeats", "1", "--out", out, "--quiet", "--probes", "none",
		"--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--timeout", "60s"}, extra...)
}

func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	var v T
	readJSONInto(t, path, &v)
	return v
}

// checkDiarizeFiles checks one pass's two files: the fields SGLang-Omni
// writes, every sample scored, and the corpus figures equal to scoring the
// per-sample texts again.
func checkDiarizeFiles(t *testing.T, dir, results, speed string, n int, stream bool) {
	t.Helper()
	res := readJSON[bundle.DiarizeResults](t, filepath.Join(dir, results))
	if res.Config.ModelPath != refDiarizeModel {
		t.Errorf("%s: model_path %q, want %q", results, res.Config.ModelPath, refDiarizeModel)
	}
	checkDiarizeScores(t, dir, results, speed, n, stream)
}

// refDiarizeModel is the reference server's diarization model (--diarize).
const refDiarizeModel = "pocketsphinx-en-us-diarize"

func checkDiarizeScores(t *testing.T, dir, results, speed string, n int, stream bool) {
	t.Helper()
	res := readJSON[bundle.DiarizeResults](t, filepath.Join(dir, results))
	raw := readJSON[map[string]json.RawMessage](t, filepath.Join(dir, results))
	var pct map[string]any
	if err := json.Unmarshal(raw["diarization_metrics_percent"], &pct); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cer", "cer_no_spk", "cp_cer", "speaker_timestamp_der", "speaker_timestamp_der_collar",
		"speaker_timestamp_der_skipped_parse_error", "cer_valid_samples", "count"} {
		if _, ok := pct[k]; !ok {
			t.Errorf("%s: diarization_metrics_percent has no %s", results, k)
		}
	}
	s := res.Summary
	if s.TotalSamples != n || s.Evaluated != n || s.Skipped != 0 || s.Mismatches+s.ExactMatches != n {
		t.Errorf("%s: summary %+v, want %d evaluated", results, s, n)
	}
	if res.Config.Stream != stream {
		t.Errorf("%s: config %+v", results, res.Config)
	}
	m := res.DiarizationMetrics
	if m.Count != n || m.CER == nil || m.CPCER == nil || m.DER == nil || m.CERValidSamples != n || m.CPCERValidSamples != n {
		t.Fatalf("%s: metrics %+v", results, m)
	}
	// The server answered in the markup, timed: DER is scored on every sample.
	if m.DERValidSamples != n || m.DERTotalSeconds <= 0 {
		t.Errorf("%s: DER over %d samples (%.2f s), want %d", results, m.DERValidSamples, m.DERTotalSeconds, n)
	}
	if *res.MetricsPercent.DER != *m.DER*100 || *res.MetricsPercent.CPCER != *m.CPCER*100 {
		t.Errorf("%s: percent figures are not the rates ×100", results)
	}
	var rows []diarize.Row
	for _, p := range res.PerSample {
		if len(diarize.Segments(p.ResultText)) == 0 || p.DER == nil || p.CPCER == nil || p.LatencyS == nil {
			t.Errorf("%s: sample %s: %q has no timed segment or no score", results, p.ID, p.ResultText)
		}
		rows = append(rows, diarize.Row{ID: p.ID, Ref: p.ExpectedText, Pred: p.ResultText})
	}
	again := diarize.Compute(rows).Metrics
	if math.Abs(*again.DER-*m.DER) > 1e-12 || math.Abs(*again.CPCER-*m.CPCER) > 1e-12 || math.Abs(*again.CER-*m.CER) > 1e-12 {
		t.Errorf("%s: corpus figures differ from the per-sample texts scored again", results)
	}
	sp := readJSON[bundle.DiarizeSpeedResults](t, filepath.Join(dir, speed))
	if sp.SchemaVersion != 1 || sp.Config.TimingScope != "asr_requests_only" || sp.Speed.CompletedRequests != n ||
		sp.Speed.FailedRequests != 0 || sp.Speed.ThroughputQPS == nil || sp.Speed.LatencyP95S == nil || sp.Config.WallClockS <= 0 {
		t.Errorf("%s: %+v", speed, sp)
	}
	if stream != (sp.Speed.TextTTFTMeanS != nil) {
		t.Errorf("%s: text_ttft_mean_s %v with stream %v", speed, sp.Speed.TextTTFTMeanS, stream)
	}
}

// asrprof capture --task transcribe-diarize against the reference server's
// diarization mode, plain (one pass: SGLang-Omni's file names) and
// streaming (two levels: one pair of files per pass).
func TestCaptureTranscribeDiarize(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the reference server")
	}
	t.Parallel() // scores the answers, not their speed
	ds := refservertest.Diarset(t)
	srv := refservertest.Start(t, nil, "--diarize", ds, "--max-running-requests", "2")

	out := filepath.Join(t.TempDir(), "plain")
	code, stdout, stderr := runCLI(diarizeCapture(srv.URL, ds, out, "--concurrency", "2", "--max-samples", "2", "--model", refDiarizeModel)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "transcribe-diarize c2 repeat 1: CER ") {
		t.Errorf("no diarization line on stderr:\n%s", stderr)
	}
	checkDiarizeFiles(t, out, bundle.DiarizeResultsFile, bundle.DiarizeSpeedFile, 2, false)

	out = filepath.Join(t.TempDir(), "stream")
	code, stdout, stderr = runCLI(diarizeCapture(srv.URL, ds, out, "--protocol", "openai-stream",
		"--concurrency", "1,2", "--max-samples", "1", "--model", refDiarizeModel)...)
	if code != exitOK {
		t.Fatalf("stream: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, lv := range []string{"c1", "c2"} {
		checkDiarizeFiles(t, out, "transcribe_diarize_results."+lv+".r1.json",
			"transcribe_diarize_speed_results."+lv+".r1.json", 1, true)
	}
	if _, err := os.Stat(filepath.Join(out, bundle.DiarizeResultsFile)); err == nil {
		t.Errorf("two passes wrote %s too", bundle.DiarizeResultsFile)
	}

	// Without --model the task sends MOSS-Transcribe-Diarize's model name,
	// which this server answers with plain text: scored for CER and cpCER
	// (one implicit speaker), skipped for DER (no timed segment).
	out = filepath.Join(t.TempDir(), "plain-text")
	code, stdout, stderr = runCLI(diarizeCapture(srv.URL, ds, out, "--concurrency", "1", "--max-samples", "1")...)
	if code != exitOK {
		t.Fatalf("plain text: exit %d\n%s\n%s", code, stdout, stderr)
	}
	res := readJSON[bundle.DiarizeResults](t, filepath.Join(out, bundle.DiarizeResultsFile))
	m := res.DiarizationMetrics
	if res.Config.ModelPath != protocol.DiarizeModel || m.DER != nil || m.DERSkippedNoPredSegs != 1 || m.DERSkipped != 1 ||
		m.CPCER == nil || m.CER == nil || res.PerSample[0].DERInvalidReason == nil || *res.PerSample[0].DERInvalidReason != diarize.ReasonNoPredSegs {
		t.Errorf("plain-text answer: model %q metrics %+v", res.Config.ModelPath, m)
	}
}

func TestCaptureTaskValidation(t *testing.T) {
	code, _, stderr := runCLI("capture", "--target", "ws://127.0.0.1:1", "--dataset", "x", "--protocol", "funasr-ws",
		"--task", "transcribe-diarize", "--out", t.TempDir())
	if code == exitOK || !strings.Contains(stderr, "--task transcribe-diarize sends files") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI("capture", "--target", "http://127.0.0.1:1", "--dataset", "x", "--task", "diarise", "--out", t.TempDir())
	if code == exitOK || !strings.Contains(stderr, `--task "diarise": want asr or transcribe-diarize`) {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
