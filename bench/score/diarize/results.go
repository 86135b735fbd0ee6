package diarize

import (
	"math"
	"slices"

	"github.com/asrprof/asrprof/bench/score"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// The files of the transcribe-diarize task, named as SGLang-Omni's
// benchmark_asr_transcribe_diarize.py names them.
const (
	ResultsFile = "transcribe_diarize_results.json"
	SpeedFile   = "transcribe_diarize_speed_results.json"
)

// Input is one dataset sample of a transcribe-diarize pass: its
// reference is in the markup.
type Input struct {
	ID        string
	AudioPath string
	Expected  string
}

// RunConfig says what ran, for the files' "config" objects.
type RunConfig struct {
	Dataset        string  `json:"dataset"`
	RepoID         *string `json:"repo_id"` // a Hugging Face repository; nil for a local dataset
	Split          *string `json:"split"`
	ModelPath      string  `json:"model_path"`
	BaseURL        string  `json:"base_url"`
	Concurrency    int     `json:"concurrency"` // 0 for an open-loop level
	Warmup         int     `json:"warmup"`      // warmup requests sent before the pass
	RequestRate    any     `json:"request_rate"`
	RequestTimeout float64 `json:"request_timeout_s"`
	MaxNewTokens   int     `json:"max_new_tokens"`
	MaxSamples     *int    `json:"max_samples"`
	Stream         bool    `json:"stream"`
	Level          string  `json:"level"`  // asrprof's level name (c16, r2.5)
	Repeat         int     `json:"repeat"` // asrprof's repeat number
	WallClockS     float64 `json:"wall_clock_s"`
	TimingScope    string  `json:"timing_scope,omitempty"`
}

// Summary is transcribe_diarize_results.json's "summary":
// evaluated counts the successful requests; skipped = total − evaluated.
type Summary struct {
	TotalSamples   int     `json:"total_samples"`
	Evaluated      int     `json:"evaluated"`
	Skipped        int     `json:"skipped"`
	ExactMatches   int     `json:"exact_matches"`
	Mismatches     int     `json:"mismatches"`
	ExactMatchRate float64 `json:"exact_match_rate"`
}

// Speed is the "speed" object: SGLang-Omni's speed metrics over the
// pass's requests (compute_speed_metrics), not rounded. Latency and RTF
// are over successful requests; throughput_qps is completed requests per
// second of the pass's wall clock; audio_throughput_s_per_s is their audio
// seconds per second of wall clock. The text_ttft_* (first delta) and
// inter_chunk_* (gaps between deltas) fields are set by streaming passes.
type Speed struct {
	TotalRequests     int      `json:"total_requests"`
	CompletedRequests int      `json:"completed_requests"`
	FailedRequests    int      `json:"failed_requests"`
	LatencyMeanS      *float64 `json:"latency_mean_s,omitempty"`
	LatencyMedianS    *float64 `json:"latency_median_s,omitempty"`
	LatencyP95S       *float64 `json:"latency_p95_s,omitempty"`
	LatencyP99S       *float64 `json:"latency_p99_s,omitempty"`
	AudioDurationMean *float64 `json:"audio_duration_mean_s,omitempty"`
	RTFMean           *float64 `json:"rtf_mean,omitempty"`
	RTFMedian         *float64 `json:"rtf_median,omitempty"`
	RTFP95            *float64 `json:"rtf_p95,omitempty"`
	RTFP99            *float64 `json:"rtf_p99,omitempty"`
	ThroughputQPS     *float64 `json:"throughput_qps,omitempty"`
	AudioThroughput   *float64 `json:"audio_throughput_s_per_s,omitempty"`
	TextTTFTMeanS     *float64 `json:"text_ttft_mean_s,omitempty"`
	TextTTFTMedianS   *float64 `json:"text_ttft_median_s,omitempty"`
	TextTTFTP95S      *float64 `json:"text_ttft_p95_s,omitempty"`
	TextTTFTP99S      *float64 `json:"text_ttft_p99_s,omitempty"`
	InterChunkMeanS   *float64 `json:"inter_chunk_mean_s,omitempty"`
	InterChunkP95S    *float64 `json:"inter_chunk_p95_s,omitempty"`
	InterChunkP99S    *float64 `json:"inter_chunk_p99_s,omitempty"`
}

// PerSample is one entry of "per_sample". The diarization fields are
// null for a sample whose request failed or was not sent.
type PerSample struct {
	ID                 string   `json:"id"`
	AudioPath          string   `json:"audio_path"`
	ExpectedText       string   `json:"expected_text"`
	ResultText         string   `json:"result_text"`
	ExpectedNormalized string   `json:"expected_normalized"`
	ResultNormalized   string   `json:"result_normalized"`
	IsExactMatch       bool     `json:"is_exact_match"`
	LatencyS           *float64 `json:"latency_s"`
	AudioDurationS     *float64 `json:"audio_duration_s"`
	Error              *string  `json:"error"`
	CERNoSpk           *float64 `json:"cer_no_spk"`
	CPCER              *float64 `json:"cp_cer"`
	CERValid           *bool    `json:"cer_valid"`
	CPCERValid         *bool    `json:"cp_cer_valid"`
	CPInvalidReason    *string  `json:"cp_invalid_reason"`
	DERValid           *bool    `json:"speaker_timestamp_der_valid"`
	DERInvalidReason   *string  `json:"speaker_timestamp_der_invalid_reason"`
	RefSegments        *int     `json:"speaker_timestamp_ref_segments"`
	PredSegments       *int     `json:"speaker_timestamp_pred_segments"`
	DER                *float64 `json:"speaker_timestamp_der"`
	DERTotalSeconds    *float64 `json:"speaker_timestamp_der_total_seconds"`
	DERFalseAlarm      *float64 `json:"speaker_timestamp_der_false_alarm"`
	DERMissedDetection *float64 `json:"speaker_timestamp_der_missed_detection"`
	DERConfusion       *float64 `json:"speaker_timestamp_der_confusion"`
}

// ResultsJSON is transcribe_diarize_results.json.
type ResultsJSON struct {
	Config             RunConfig   `json:"config"`
	Summary            Summary     `json:"summary"`
	Speed              Speed       `json:"speed"`
	DiarizationMetrics Metrics     `json:"diarization_metrics"`
	MetricsPercent     Metrics     `json:"diarization_metrics_percent"`
	PerSample          []PerSample `json:"per_sample"`
}

// SpeedJSON is transcribe_diarize_speed_results.json.
type SpeedJSON struct {
	SchemaVersion int       `json:"schema_version"`
	Config        RunConfig `json:"config"`
	Speed         Speed     `json:"speed"`
}

// Score builds both files of one transcribe-diarize pass from its
// dataset and its (scored, non-warmup) records, as SGLang-Omni's
// build_evaluation_payload does: only successful requests are scored
// (bench/score/diarize), each sample appears in per_sample in dataset
// order, and the prediction is the server's text stripped.
func Score(samples []Input, recs []model.Request, cfg RunConfig) (ResultsJSON, SpeedJSON) {
	byID := make(map[string]*model.Request, len(recs))
	for i := range recs {
		if _, dup := byID[recs[i].SampleID]; !dup && !recs[i].Warmup {
			byID[recs[i].SampleID] = &recs[i]
		}
	}
	ok := func(r *model.Request) bool { return r != nil && r.Status == model.StatusOK }
	var rows []Row
	for _, s := range samples {
		if r := byID[s.ID]; ok(r) {
			rows = append(rows, Row{ID: s.ID, Ref: s.Expected, Pred: score.PyStrip(r.Hyp)})
		}
	}
	scored := Compute(rows)
	bySample := make(map[string]*Sample, len(scored.Samples))
	for i := range scored.Samples {
		bySample[scored.Samples[i].ID] = &scored.Samples[i]
	}
	res := ResultsJSON{
		Config:             cfg,
		DiarizationMetrics: scored.Metrics,
		MetricsPercent:     scored.Percent,
		PerSample:          make([]PerSample, 0, len(samples)),
	}
	res.Config.TimingScope = ""
	sum := &res.Summary
	for _, s := range samples {
		r := byID[s.ID]
		p := PerSample{ID: s.ID, AudioPath: s.AudioPath, ExpectedText: s.Expected,
			ExpectedNormalized: NormalizeExact(s.Expected)}
		if r != nil {
			p.LatencyS, p.AudioDurationS = new(r.LatencyS), new(r.AudioDurationS)
			if r.Error != "" {
				p.Error = &r.Error
			}
		}
		if ok(r) {
			sum.Evaluated++
			p.ResultText = score.PyStrip(r.Hyp)
			if p.ResultText != "" {
				p.ResultNormalized = NormalizeExact(p.ResultText)
			}
			p.IsExactMatch = p.ExpectedNormalized == p.ResultNormalized
			if p.IsExactMatch {
				sum.ExactMatches++
			}
		}
		if d := bySample[s.ID]; d != nil && ok(r) {
			p.CERNoSpk, p.CPCER = d.CERNoSpk, d.CPCER
			p.CERValid, p.CPCERValid, p.CPInvalidReason = &d.CERValid, &d.CPCERValid, &d.CPInvalidReason
			p.DERValid, p.DERInvalidReason = &d.DERValid, &d.DERInvalidReason
			p.RefSegments, p.PredSegments = &d.RefSegments, &d.PredSegments
			p.DER = d.DER
			p.DERTotalSeconds, p.DERFalseAlarm = &d.DERTotalSeconds, &d.DERFalseAlarm
			p.DERMissedDetection, p.DERConfusion = &d.DERMissedDetection, &d.DERConfusion
		}
		res.PerSample = append(res.PerSample, p)
	}
	sum.TotalSamples = len(samples)
	sum.Skipped = sum.TotalSamples - sum.Evaluated
	sum.Mismatches = sum.Evaluated - sum.ExactMatches
	if sum.Evaluated > 0 {
		sum.ExactMatchRate = float64(sum.ExactMatches) / float64(sum.Evaluated)
	}
	passRecs := slices.DeleteFunc(slices.Clone(recs), func(r model.Request) bool { return r.Warmup })
	res.Speed = diarizeSpeed(passRecs, cfg.WallClockS)
	speedCfg := cfg
	speedCfg.TimingScope = "asr_requests_only"
	return res, SpeedJSON{SchemaVersion: 1, Config: speedCfg, Speed: res.Speed}
}

// diarizeSpeed is compute_speed_metrics over a pass's records.
func diarizeSpeed(recs []model.Request, wallS float64) Speed {
	var lat, rtf, audio, ttft, gaps []float64
	sp := Speed{TotalRequests: len(recs)}
	for _, r := range recs {
		if r.Status != model.StatusOK {
			sp.FailedRequests++
			continue
		}
		sp.CompletedRequests++
		lat = append(lat, r.LatencyS)
		if r.AudioDurationS > 0 {
			audio = append(audio, r.AudioDurationS)
			if x := r.LatencyS / r.AudioDurationS; x > 0 && !math.IsInf(x, 0) {
				rtf = append(rtf, x)
			}
		}
		if r.FirstTokenUnixNs != 0 {
			ttft = append(ttft, r.TTFTS)
		}
		gaps = append(gaps, r.ChunkGapsS...)
	}
	if sp.CompletedRequests == 0 {
		return sp
	}
	pct := func(xs []float64, p float64) *float64 {
		if len(xs) == 0 {
			return nil
		}
		return new(stats.Percentile(xs, p))
	}
	mean := func(xs []float64) *float64 {
		if len(xs) == 0 {
			return nil
		}
		return new(stats.Mean(xs))
	}
	sp.LatencyMeanS, sp.LatencyMedianS, sp.LatencyP95S, sp.LatencyP99S = mean(lat), pct(lat, 50), pct(lat, 95), pct(lat, 99)
	sp.AudioDurationMean = mean(audio)
	if sp.AudioDurationMean == nil {
		sp.AudioDurationMean = new(0.0)
	}
	sp.RTFMean, sp.RTFMedian, sp.RTFP95, sp.RTFP99 = mean(rtf), pct(rtf, 50), pct(rtf, 95), pct(rtf, 99)
	if wallS > 0 {
		sp.ThroughputQPS = new(float64(sp.CompletedRequests) / wallS)
		sp.AudioThroughput = new(stats.Sum(audio) / wallS)
	}
	sp.TextTTFTMeanS, sp.TextTTFTMedianS, sp.TextTTFTP95S, sp.TextTTFTP99S = mean(ttft), pct(ttft, 50), pct(ttft, 95), pct(ttft, 99)
	sp.InterChunkMeanS, sp.InterChunkP95S, sp.InterChunkP99S = mean(gaps), pct(gaps, 95), pct(gaps, 99)
	return sp
}
