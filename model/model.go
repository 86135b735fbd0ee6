// Package model holds the capture's data model: the records that a capture
// writes into its bundle and that analyses and exporters read back.
//
// It is a leaf package: it imports nothing of asrprof's (bundle,
// trace/otlp, trace/join...), so every other package may depend on it.
package model

import (
	"cmp"
	"strconv"
	"strings"
)

// Schema is the value of Manifest.Schema for bundles this version writes.
const Schema = "asrprof.capture/v1"

// Request outcome values for Request.Status.
const (
	StatusOK     = "ok"     // the server answered and the answer was read in full
	StatusFailed = "failed" // see Request.Error and Request.ErrorKind
)

// Failure kinds, the keys of Coverage.FailureKinds.
const (
	FailHTTP4xx     = "http_4xx"
	FailHTTP5xx     = "http_5xx"
	FailTimeout     = "timeout"
	FailConnection  = "connection"
	FailMalformed   = "malformed_response"
	FailServerError = "server_error" // an error event inside a 200 stream
	FailCanceled    = "canceled"
	FailOther       = "other"
)

// WordErrors are the alignment counts of one sample.
type WordErrors struct {
	Sub      int `json:"sub"`
	Del      int `json:"del"`
	Ins      int `json:"ins"`
	RefWords int `json:"ref_words"`
}

// Request is one line of requests.jsonl: one request (or realtime session)
// as the client saw it. Timestamps are wall clock in unix nanoseconds;
// durations come from the monotonic clock. The struct is the request
// schema, declared once: requests.jsonl's reader, requests.parquet and
// Starlark's request values derive theirs from it (RequestFields); the
// tag parquet:",dict" marks a string of few distinct values, and span:"k"
// a field that the client's request span holds as attribute k.
type Request struct {
	ID               string      `json:"id"`
	SampleID         string      `json:"sample_id" parquet:",dict" span:"asrprof.sample_id"`
	Level            string      `json:"level" parquet:",dict" span:"asrprof.level"` // e.g. "c8" or "r2.5"
	Repeat           int         `json:"repeat" span:"asrprof.repeat"`
	Warmup           bool        `json:"warmup" span:"asrprof.warmup"`
	TraceID          string      `json:"trace_id"`
	RequestID        string      `json:"request_id" span:"asrprof.request_id"`
	ServerRequestID  string      `json:"server_request_id,omitempty" span:"asrprof.server_request_id"`
	IntendedUnixNs   int64       `json:"intended_unix_ns,omitempty"` // open loop: the scheduled send time
	StartUnixNs      int64       `json:"start_unix_ns"`
	ConnectedUnixNs  int64       `json:"connected_unix_ns,omitempty"`   // its own new connection was established (absent on a reused one)
	UploadDoneUnixNs int64       `json:"upload_done_unix_ns,omitempty"` // the request body was sent in full
	FirstByteUnixNs  int64       `json:"first_byte_unix_ns,omitempty"`
	FirstTokenUnixNs int64       `json:"first_token_unix_ns,omitempty"`
	EndUnixNs        int64       `json:"end_unix_ns"`
	LatencyS         float64     `json:"latency_s"`
	TTFTS            float64     `json:"ttft_s,omitempty"`
	ChunkGapsS       []float64   `json:"chunk_gaps_s,omitempty"`
	AudioDurationS   float64     `json:"audio_duration_s" span:"asr.audio_seconds"`
	HTTPStatus       int         `json:"http_status,omitempty"`
	Status           string      `json:"status" parquet:",dict"`
	ErrorKind        string      `json:"error_kind,omitempty" parquet:",dict"`
	Error            string      `json:"error,omitempty" parquet:",dict"`
	Hyp              string      `json:"hyp"`
	Ref              string      `json:"ref"`
	Lang             string      `json:"lang,omitempty" parquet:",dict"`
	Scored           bool        `json:"scored"` // false when failed, warmup, or the normalized reference is empty
	Errors           *WordErrors `json:"errors,omitempty"`

	// Realtime sessions only (protocols funasr-ws and openai-realtime);
	// definitions in docs/REALTIME.md. Seconds; a pointer is nil when the
	// session never reached the point it measures.
	FirstUpdateS    *float64 `json:"first_update_s,omitempty"`             // first audio frame sent → first message with text
	FinalAfterStopS *float64 `json:"final_after_stop_s,omitempty"`         // end of input sent → final message
	LagP95S         *float64 `json:"lag_p95_s,omitempty"`                  // p95 of the per-update response lags
	LagMaxS         *float64 `json:"lag_max_s,omitempty"`                  // worst per-update response lag
	LagGrowthS      *float64 `json:"lag_growth_s,omitempty"`               // mean lag of the last third of updates − of the first third (≥ 6 updates)
	LagSource       string   `json:"lag_source,omitempty" parquet:",dict"` // server, sent or mixed: where the covered audio time came from
	Partials        int      `json:"partials,omitempty"`                   // non-final updates with text
	Finals          int      `json:"finals,omitempty"`                     // text units locked by the server
	ServerErrors    int      `json:"server_errors,omitempty"`              // error events after which the session went on (SGLang-Omni server_error)
	AudioS          float64  `json:"audio_s,omitempty"`                    // audio seconds sent (all loops)
	SendLateMaxS    *float64 `json:"send_late_max_s,omitempty"`            // realtime pacing: worst frame send after its schedule
}

// Stat is a {mean,min,max,n} summary over repeats, as SGLang-Omni writes it.
type Stat struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
}

// Coverage counts what happened to the samples of a pass (or of a capture).
// As in SGLang-Omni's ASR benchmark, Skipped is Total − Evaluated: every
// sample not scored, a failed request included. Failed (with FailureKinds)
// and EmptyRef say why.
type Coverage struct {
	Total     int `json:"total"`
	Evaluated int `json:"evaluated"`
	Skipped   int `json:"skipped"` // Total − Evaluated
	Failed    int `json:"failed"`
	// EmptyRef counts successful requests whose reference is empty after
	// normalization (skipped, not failed).
	EmptyRef     int            `json:"empty_ref,omitempty"`
	BadInput     int            `json:"bad_input,omitempty"` // dataset entries dropped by --skip-bad
	FailureKinds map[string]int `json:"failure_kinds,omitempty"`
}

// Add accumulates o into c.
func (c *Coverage) Add(o Coverage) {
	c.Total += o.Total
	c.Evaluated += o.Evaluated
	c.Skipped += o.Skipped
	c.Failed += o.Failed
	c.EmptyRef += o.EmptyRef
	c.BadInput += o.BadInput
	for k, v := range o.FailureKinds {
		if c.FailureKinds == nil {
			c.FailureKinds = map[string]int{}
		}
		c.FailureKinds[k] += v
	}
}

// PassMetrics are the metrics of one level and repeat.
type PassMetrics struct {
	Level                 string   `json:"level"`
	Concurrency           int      `json:"concurrency,omitempty"`
	Rate                  float64  `json:"rate,omitempty"`
	Repeat                int      `json:"repeat"`
	Warmup                bool     `json:"warmup,omitempty"` // the unscored warmup pass (never in results.json)
	WallS                 float64  `json:"wall_s"`
	ThroughputSamplesPerS float64  `json:"throughput_samples_per_s"`
	RequestsPerS          float64  `json:"requests_per_s"`
	RTFx                  float64  `json:"rtfx"`
	LatencyMeanS          float64  `json:"latency_mean_s"`
	LatencyMedianS        float64  `json:"latency_median_s"`
	LatencyP95S           float64  `json:"latency_p95_s"`
	LatencyP99S           float64  `json:"latency_p99_s"`
	RTFMean               float64  `json:"rtf_mean"`
	RTFP95                float64  `json:"rtf_p95"`
	CorpusWER             float64  `json:"corpus_wer"`
	TTFTMeanS             *float64 `json:"ttft_mean_s,omitempty"`
	TTFTP95S              *float64 `json:"ttft_p95_s,omitempty"`
	ChunkGapMeanS         *float64 `json:"chunk_gap_mean_s,omitempty"`
	ChunkGapP95S          *float64 `json:"chunk_gap_p95_s,omitempty"`
	// Realtime sessions only (docs/REALTIME.md), over successful sessions.
	AudioSPerWallS     *float64 `json:"audio_s_per_wall_s,omitempty"` // aggregate realtime factor: Σ audio_s / wall
	FirstUpdateP50S    *float64 `json:"first_update_p50_s,omitempty"`
	FirstUpdateP95S    *float64 `json:"first_update_p95_s,omitempty"`
	FinalAfterStopP50S *float64 `json:"final_after_stop_p50_s,omitempty"`
	FinalAfterStopP95S *float64 `json:"final_after_stop_p95_s,omitempty"`
	LagP95WorstS       *float64 `json:"lag_p95_worst_s,omitempty"`   // the worst session's lag_p95_s
	LagGrowthMeanS     *float64 `json:"lag_growth_mean_s,omitempty"` // mean of the sessions' lag_growth_s
	Coverage           Coverage `json:"coverage"`
	// Goodput under the capture's SLO (--slo; model/summary.NewAcc), absent
	// without one: requests that succeeded and met every limit per second,
	// their share of the requests counted (those the client's stop canceled
	// are left out), and per limit ("error" for failures) how many missed it.
	SLO           string         `json:"slo,omitempty"`
	GoodputReqS   *float64       `json:"goodput_req_s,omitempty"`
	SLOAttainment *float64       `json:"slo_attainment,omitempty"`
	SLOMet        int            `json:"slo_met,omitempty"`
	SLOCounted    int            `json:"slo_counted,omitempty"`
	SLOCanceled   int            `json:"slo_canceled,omitempty"`
	SLOMisses     map[string]int `json:"slo_misses,omitempty"`
}

// LevelResult is one entry of results.json's results[]: a level summarised
// over its scored repeats, in SGLang-Omni's shape.
type LevelResult struct {
	Level                 string        `json:"level"`
	Concurrency           int           `json:"concurrency,omitempty"`
	Rate                  float64       `json:"rate,omitempty"`
	Repeats               int           `json:"repeats"`
	Evaluated             int           `json:"evaluated"`
	Total                 int           `json:"total"`
	Skipped               int           `json:"skipped"`
	Failed                int           `json:"failed"`
	CorpusWER             Stat          `json:"corpus_wer"`
	ThroughputSamplesPerS Stat          `json:"throughput_samples_per_s"`
	RTFx                  Stat          `json:"rtfx"`
	LatencyMeanS          Stat          `json:"latency_mean_s"`
	LatencyMedianS        Stat          `json:"latency_median_s"`
	LatencyP95S           Stat          `json:"latency_p95_s"`
	LatencyP99S           Stat          `json:"latency_p99_s"`
	RTFMean               Stat          `json:"rtf_mean"`
	RTFP95                Stat          `json:"rtf_p95"`
	PerRepeat             []PassMetrics `json:"per_repeat"`

	// Goodput under the SLO (absent without one): goodput and attainment
	// over the repeats; met and counted summed over them.
	SLO           string `json:"slo,omitempty"`
	GoodputReqS   *Stat  `json:"goodput_req_s,omitempty"`
	SLOAttainment *Stat  `json:"slo_attainment,omitempty"`
	SLOMet        int    `json:"slo_met,omitempty"`
	SLOCounted    int    `json:"slo_counted,omitempty"`
}

// Results is results.json.
type Results struct {
	Schema  string        `json:"schema"`
	Results []LevelResult `json:"results"`
}

// LevelRun records when one pass of a level ran.
type LevelRun struct {
	Level       string  `json:"level"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Repeat      int     `json:"repeat"`
	Warmup      bool    `json:"warmup"`
	StartUnixNs int64   `json:"start_unix_ns"`
	EndUnixNs   int64   `json:"end_unix_ns"`
	// WallS is the pass's duration on the monotonic clock, the wall of its
	// metrics (0 in bundles written before it was recorded).
	WallS float64 `json:"wall_s,omitempty"`
}

// Wall is the pass's wall time in seconds: WallS, else its start to its
// end.
func (l LevelRun) Wall() float64 {
	if l.WallS > 0 {
		return l.WallS
	}
	return float64(l.EndUnixNs-l.StartUnixNs) / 1e9
}

// Fingerprint identifies the software, machine, target and data of a capture.
type Fingerprint struct {
	Version       string         `json:"asrprof_version"`
	GitCommit     string         `json:"git_commit"`
	GoVersion     string         `json:"go_version"`
	Hostname      string         `json:"hostname"`
	Kernel        string         `json:"kernel"`
	CPUModel      string         `json:"cpu_model"`
	CPUCount      int            `json:"cpu_count"`
	TargetURL     string         `json:"target_url"`
	TargetModels  any            `json:"target_models,omitempty"` // the /v1/models answer, as JSON
	DatasetSHA256 string         `json:"dataset_sha256"`
	DatasetCount  int            `json:"dataset_count"`
	Extra         map[string]any `json:"extra,omitempty"`
}

// ModelIDs are the ids of an OpenAI-style /v1/models answer
// ({"data":[{"id":...},...]}), in its order; nil for any other answer.
func (f Fingerprint) ModelIDs() []string {
	m, _ := f.TargetModels.(map[string]any)
	data, _ := m["data"].([]any)
	var ids []string
	for _, d := range data {
		if e, ok := d.(map[string]any); ok {
			if id, ok := e["id"].(string); ok && id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Clock records how the wall and monotonic clocks related during a capture.
type Clock struct {
	StartUnixNs int64 `json:"start_unix_ns"`
	// MonoMinusWallNs: CLOCK_MONOTONIC minus CLOCK_REALTIME at start and end.
	StartMonoMinusWallNs int64 `json:"start_mono_minus_wall_ns,omitempty"`
	EndMonoMinusWallNs   int64 `json:"end_mono_minus_wall_ns,omitempty"`
	// Probes holds offsets of probe clocks from the wall clock, e.g.
	// "gpu_minus_wall_ns" (NVML timestamps minus system time).
	Probes map[string]int64 `json:"probes,omitempty"`
	// Agents holds, for a capture whose probes ran in asrprof serve on
	// other hosts (--agent), each agent's clock measured against this
	// one over its API, at the start and at the end of the capture.
	Agents []AgentClock `json:"agents,omitempty"`
}

// AgentClock is one NTP-style measurement of an agent's wall clock: of
// several round trips, the one with the smallest round-trip time; the
// agent's clock minus ours is OffsetNs ± UncertaintyNs (half that round
// trip). Agent timestamps in the bundle (gpu samples) are on the agent's
// clock; subtract OffsetNs to put them on the driver's.
type AgentClock struct {
	Agent         string `json:"agent"`
	When          string `json:"when"` // "start" or "end"
	AtUnixNs      int64  `json:"at_unix_ns"`
	OffsetNs      int64  `json:"offset_ns"`
	UncertaintyNs int64  `json:"uncertainty_ns"`
	MinRTTNs      int64  `json:"min_rtt_ns"`
	Samples       int    `json:"samples"`
}

// Manifest is manifest.json.
type Manifest struct {
	Schema string `json:"schema"`
	// Complete is true only when the capture ran to its end and every
	// scored pass has full coverage: evaluated == total, no skipped and no
	// failed requests. Incomplete says why not.
	Complete    bool           `json:"complete"`
	Finished    bool           `json:"finished"` // ran to its end (not interrupted, not killed)
	Incomplete  []string       `json:"incomplete,omitempty"`
	Interrupted bool           `json:"interrupted,omitempty"`
	StartUnixNs int64          `json:"start_unix_ns"`
	EndUnixNs   int64          `json:"end_unix_ns,omitempty"`
	Config      map[string]any `json:"config"`
	Fingerprint Fingerprint    `json:"fingerprint"`
	Levels      []LevelRun     `json:"levels"`
	Coverage    Coverage       `json:"coverage"`
	Clock       Clock          `json:"clock"`
	Files       []string       `json:"files,omitempty"`
	Notes       []string       `json:"notes,omitempty"`
	Extra       map[string]any `json:"extra,omitempty"` // sections later features add (join, probes)
}

// ConcurrencyLevel is the name of a closed-loop level: "c8".
func ConcurrencyLevel(n int) string { return "c" + strconv.Itoa(n) }

// RateLevel is the name of an open-loop level: "r2.5" (three decimals at
// most, trailing zeros dropped).
func RateLevel(r float64) string {
	return "r" + strings.TrimRight(strings.TrimRight(strconv.FormatFloat(r, 'f', 3, 64), "0"), ".")
}

// ParseLevel reads a level name back: its concurrency ("c8") or its rate
// ("r2.5"); ok is false for any other name (the proxy's "proxy", a name
// given with --levels).
func ParseLevel(name string) (concurrency int, rate float64, ok bool) {
	if len(name) < 2 {
		return 0, 0, false
	}
	switch name[0] {
	case 'c':
		if strings.Trim(name[1:], "0123456789") != "" {
			return 0, 0, false
		}
		n, err := strconv.Atoi(name[1:])
		return n, 0, err == nil
	case 'r':
		r, err := strconv.ParseFloat(name[1:], 64)
		return 0, r, err == nil
	}
	return 0, 0, false
}

// CompareLevels orders level names by load, for slices.SortStableFunc:
// closed-loop levels ("c4" before "c16") before open-loop ones ("r0.5"
// before "r2"); names ParseLevel does not read come last, in the order
// they had.
func CompareLevels(a, b string) int {
	key := func(name string) (int, float64) {
		c, r, ok := ParseLevel(name)
		switch {
		case !ok:
			return 2, 0
		case name[0] == 'c':
			return 0, float64(c)
		}
		return 1, r
	}
	ka, va := key(a)
	kb, vb := key(b)
	return cmp.Or(cmp.Compare(ka, kb), cmp.Compare(va, vb))
}

// LevelLabel is how tables print a level: "c32" → "c=32", "r2.5" →
// "rate=2.5/s"; any other name as it is.
// A name that only starts with "r" (a replay's "replay") is not a rate.
func LevelLabel(name string) string {
	if _, _, ok := ParseLevel(name); !ok {
		return name
	}
	if name[0] == 'c' {
		return "c=" + name[1:]
	}
	return "rate=" + name[1:] + "/s"
}
