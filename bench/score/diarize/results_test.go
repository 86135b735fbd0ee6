package diarize

import (
	"encoding/json"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/model"
)

func TestDiarize(t *testing.T) {
	samples := []Input{
		{"a", "/d/a.wav", "[0.00][S01]abcd[2.00][2.00][S02]efgh[4.00]"},
		{"b", "/d/b.wav", "[0.0][S01]hello[3.0]"},
		{"c", "/d/c.wav", "[0.0][S01]x[1.0]"},
		{"d", "/d/d.wav", "[0.0][S01]y[1.0]"}, // not sent
	}
	recs := []model.Request{
		{SampleID: "b", Status: model.StatusOK, Hyp: " [1.0][S01]hello[4.0] ", LatencyS: 2, AudioDurationS: 4},
		{SampleID: "a", Status: model.StatusOK, Hyp: "[0.00][S01]abcdefgh[4.00]", LatencyS: 1, AudioDurationS: 4},
		{SampleID: "c", Status: model.StatusFailed, Error: "http status 500", LatencyS: 0.5, AudioDurationS: 1},
		{SampleID: "a", Status: model.StatusOK, Warmup: true, Hyp: "ignored", LatencyS: 9},
	}
	res, speed := Score(samples, recs, bundle.DiarizeConfig{Dataset: "ds", WallClockS: 4, Concurrency: 2})
	s := res.Summary
	if s.TotalSamples != 4 || s.Evaluated != 2 || s.Skipped != 2 || s.ExactMatches != 1 || s.Mismatches != 1 || s.ExactMatchRate != 0.5 { // b matches: times are not compared
		t.Errorf("summary %+v", s)
	}
	m := res.DiarizationMetrics
	if m.Count != 2 || m.CPCER == nil || math.Abs(*m.CPCER-8.0/13) > 1e-12 || m.DER == nil || math.Abs(*m.DER-4.0/7) > 1e-12 {
		t.Errorf("metrics %+v", m)
	}
	if res.MetricsPercent.DER == nil || math.Abs(*res.MetricsPercent.DER-400.0/7) > 1e-9 {
		t.Errorf("percent DER %v", res.MetricsPercent.DER)
	}
	if len(res.PerSample) != 4 || res.PerSample[0].ID != "a" || res.PerSample[1].ResultText != "[1.0][S01]hello[4.0]" {
		t.Fatalf("per_sample order or text: %+v", res.PerSample)
	}
	c := res.PerSample[2]
	if c.Error == nil || *c.Error != "http status 500" || c.CERValid != nil || c.DER != nil || c.LatencyS == nil || c.ResultText != "" {
		t.Errorf("failed sample %+v", c)
	}
	if d := res.PerSample[3]; d.LatencyS != nil || d.Error != nil {
		t.Errorf("unsent sample %+v", d)
	}
	sp := speed.Speed
	if speed.SchemaVersion != 1 || speed.Config.TimingScope != "asr_requests_only" || res.Config.TimingScope != "" {
		t.Errorf("speed file header: %+v", speed)
	}
	if sp.TotalRequests != 3 || sp.CompletedRequests != 2 || sp.FailedRequests != 1 ||
		*sp.LatencyMeanS != 1.5 || *sp.ThroughputQPS != 0.5 || *sp.RTFMean != 0.375 || *sp.AudioThroughput != 2 || sp.TextTTFTMeanS != nil {
		t.Errorf("speed %+v", sp)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"diarization_metrics_percent"`, `"speaker_timestamp_der_skipped_no_pred_segments"`, `"cp_cer":null`, `"exact_match_rate"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("results JSON lacks %s", k)
		}
	}
}
