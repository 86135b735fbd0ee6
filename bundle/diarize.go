package bundle

// The files of the transcribe-diarize task, named as SGLang-Omni's
// benchmark_asr_transcribe_diarize.py names them.
const (
	DiarizeResultsFile = "transcribe_diarize_results.json"
	DiarizeSpeedFile   = "transcribe_diarize_speed_results.json"
)

// DiarizeConfig says what ran, for the files' "config" objects.
type DiarizeConfig struct {
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

// DiarizeSummary is transcribe_diarize_results.json's "summary":
// evaluated counts the successful requests; skipped = total − evaluated.
type DiarizeSummary struct {
	TotalSamples   int     `json:"total_samples"`
	Evaluated      int     `json:"evaluated"`
	Skipped        int     `json:"skipped"`
	ExactMatches   int     `json:"exact_matches"`
	Mismatches     int     `json:"mismatches"`
	ExactMatchRate float64 `json:"exact_match_rate"`
}

// DiarizeSpeed is the "speed" object: SGLang-Omni's speed metrics over the
// pass's requests (compute_speed_metrics), not rounded. Latency and RTF
// are over successful requests; throughput_qps is completed requests per
// second of the pass's wall clock; audio_throughput_s_per_s is their audio
// seconds per second of wall clock. The text_ttft_* (first delta) and
// inter_chunk_* (gaps between deltas) fields are set by streaming passes.
type DiarizeSpeed struct {
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

// DiarizePerSample is one entry of "per_sample". The diarization fields are
// null for a sample whose request failed or was not sent.
type DiarizePerSample struct {
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

// DiarizeMetrics are the corpus figures (diarization_metrics), in the
// reference's key order. Rates are fractions here and percentages in
// Result.Percent; nil is JSON null (no sample to rate).
type DiarizeMetrics struct {
	CERNoSpk             *float64 `json:"cer_no_spk"`
	CER                  *float64 `json:"cer"`
	CERBelow50Corpus     *float64 `json:"cer_no_spk_below_50_corpus"`
	NAbove50             int      `json:"n_above_50_pct_cer"`
	PctAbove50           float64  `json:"pct_above_50_pct_cer"`
	CPCER                *float64 `json:"cp_cer"`
	CERNoSpkCPValid      *float64 `json:"cer_no_spk_cp_valid"`
	DeltaCER             *float64 `json:"delta_cer"`
	CERValidSamples      int      `json:"cer_valid_samples"`
	CPCERValidSamples    int      `json:"cp_cer_valid_samples"`
	DER                  *float64 `json:"speaker_timestamp_der"`
	DERCollar            float64  `json:"speaker_timestamp_der_collar"`
	DERValidSamples      int      `json:"speaker_timestamp_der_valid_samples"`
	DERSkipped           int      `json:"speaker_timestamp_der_skipped"`
	DERSkippedParseError int      `json:"speaker_timestamp_der_skipped_parse_error"`
	DERSkippedNoRefSegs  int      `json:"speaker_timestamp_der_skipped_no_ref_segments"`
	DERSkippedNoPredSegs int      `json:"speaker_timestamp_der_skipped_no_pred_segments"`
	DERComputeError      string   `json:"speaker_timestamp_der_compute_error"`
	DERTotalSeconds      float64  `json:"speaker_timestamp_der_total_seconds"`
	DERFalseAlarm        float64  `json:"speaker_timestamp_der_false_alarm"`
	DERMissedDetection   float64  `json:"speaker_timestamp_der_missed_detection"`
	DERConfusion         float64  `json:"speaker_timestamp_der_confusion"`
	Count                int      `json:"count"`
}

// DiarizeResults is transcribe_diarize_results.json.
type DiarizeResults struct {
	Config             DiarizeConfig      `json:"config"`
	Summary            DiarizeSummary     `json:"summary"`
	Speed              DiarizeSpeed       `json:"speed"`
	DiarizationMetrics DiarizeMetrics     `json:"diarization_metrics"`
	MetricsPercent     DiarizeMetrics     `json:"diarization_metrics_percent"`
	PerSample          []DiarizePerSample `json:"per_sample"`
}

// DiarizeSpeedResults is transcribe_diarize_speed_results.json.
type DiarizeSpeedResults struct {
	SchemaVersion int           `json:"schema_version"`
	Config        DiarizeConfig `json:"config"`
	Speed         DiarizeSpeed  `json:"speed"`
}
