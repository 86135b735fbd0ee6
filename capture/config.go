// Package capture runs a capture session: it checks the dataset and the
// target, opens the bundle, starts the probes, drives every level and
// repeat through bench, and finalizes the bundle. It wires packages
// together and holds no protocol or probe details of its own.
//
// It computes no table either: the tables a finished capture prints come
// from the Finish its caller passes (Session.OnFinish). asrprof passes
// the default analyses, whose sweep is the script `show` and `analyze` run,
// so one table says the same thing, with the same notes, everywhere.
package capture

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/table"
)

// Config is everything `asrprof capture` was asked to do. It is recorded
// in the manifest (manifest.json "config") by marshalling it: every field
// under its json name, durations in seconds (MarshalJSON; their names end
// in _s). Fields tagged "-" say how to present or where to write, not
// what was measured. Its flags are Options.
// DefaultConfig and SetDefaults give the defaults of a user who sets
// nothing.
type Config struct {
	Target string `json:"target"`
	// TargetGiven is --target as given when it ended in the API path that
	// asrprof adds itself (SetDefaults; OpenAI clients' base_url ends in
	// /v1); said at the start, not recorded: Target is what was measured.
	TargetGiven string `json:"-"`
	Dataset     string `json:"dataset"`
	Protocol    string `json:"protocol"`
	Model       string `json:"model"`
	// Endpoint is the multipart protocols' path ("": the OpenAI API's,
	// protocol.TranscriptionsPath).
	Endpoint string `json:"endpoint,omitempty"`
	// Headers are sent with every request, WebSocket upgrade and target
	// check, as curl's -H takes them ("Authorization: Bearer KEY" for a
	// server started with --api-key). Not recorded: they may hold secrets.
	Headers     []string      `json:"-"`
	Lang        string        `json:"lang"`
	Concurrency []int         `json:"concurrency"`
	Rates       []float64     `json:"rates"`
	Arrivals    load.Arrivals `json:"arrivals"`
	Seed        uint64        `json:"seed"`
	Repeats     int           `json:"repeats"`
	Warmup      bool          `json:"warmup"`
	// Solo adds a c=1 level before the others when the sweep has none:
	// each sample's service alone, the baseline of the diagnosis seen
	// from outside (docs/ANALYSIS.md, "Seen from outside").
	Solo       bool          `json:"solo,omitempty"`
	MaxSamples int           `json:"max_samples"`
	Timeout    time.Duration `json:"timeout_s"`
	Grace      time.Duration `json:"grace_s"`
	// ReadyTimeout bounds the wait for a /health that answers but is not
	// yet 200 (a server loading its model).
	ReadyTimeout time.Duration `json:"ready_timeout_s"`
	Out          string        `json:"out"`
	Overwrite    bool          `json:"-"`
	Format       string        `json:"-"`
	SkipBad      bool          `json:"skip_bad"`
	// Probes lists the probes to run ("auto": every one this machine
	// supports; "none": no probes).
	Probes []string `json:"probes"`
	// PID is the server's process; 0 finds it from the target's port.
	PID    int     `json:"pid"`
	ProcHz float64 `json:"proc_hz"`
	CPUHz  int     `json:"cpu_hz"`
	// CPUEngine is the cpu probe's engine: "auto" (""), "otel", "fp" or
	// "perf".
	CPUEngine string `json:"cpu_engine"`
	// BPFStats turns on the kernel's BPF run-time statistics for the
	// capture, to measure and record the probes' in-kernel cost.
	BPFStats bool `json:"bpf_stats"`
	// GPU probe: which GPUs (nil: all), the GPM window, PCIe throughput.
	GPUs      []int         `json:"gpus"`
	GPMWindow time.Duration `json:"gpm_window_s"`
	GPUPCIe   bool          `json:"gpu_pcie"`
	// ServerMetrics is the server's Prometheus /metrics URL that the
	// metrics probe scrapes: "auto" (or ""): the target's base URL +
	// /metrics, when it answers with the exposition format; "off": none.
	ServerMetrics string `json:"server_metrics"`
	// ServerMetricsInterval is the time between two scrapes (0: 500 ms).
	ServerMetricsInterval time.Duration `json:"server_metrics_interval_s"`
	// OTLP receiver addresses ("off" disables one) and whether a
	// non-loopback address is allowed.
	OTLPHTTP        string `json:"otlp_http"`
	OTLPGRPC        string `json:"otlp_grpc"`
	OTLPAllowRemote bool   `json:"otlp_allow_remote"`
	// SpanGrace bounds the wait for spans that arrive after the last request.
	SpanGrace time.Duration `json:"span_grace_s"`
	// EventsDir holds SGLang-Omni request-profile event files to import;
	// ProfileURL is a server whose request profiler the capture starts and
	// stops itself.
	EventsDir  string `json:"events_dir"`
	ProfileURL string `json:"profile_url"`
	Quiet      bool   `json:"-"`
	// Verbose prints the detail (Finished.Detail) after the answer; without
	// it the capture prints the answer and a line that says where the
	// detail is (Finished.DetailHint).
	Verbose bool `json:"-"`

	// Realtime protocols (funasr-ws, openai-realtime), docs/REALTIME.md:
	// audio per frame, pacing (realtime or none), loops of the audio
	// within a session, the openai-realtime dialect, and Fun-ASR hotwords.
	ChunkMs  int      `json:"chunk_ms"`
	Pace     string   `json:"pace"`
	Loops    int      `json:"loops"`
	Dialect  string   `json:"realtime_dialect"`
	Hotwords []string `json:"hotwords"`

	// Datasets stored as tables (Parquet, Hugging Face), docs/DATASETS.md:
	// the split to read ("" picks the only one, or "test") and the column
	// names where they are not the known ones.
	Split   string          `json:"split"`
	Columns dataset.Columns `json:"columns"`
	// SaveRawDir receives one conc{N}_rep{R}.jsonl per scored pass in
	// SGLang-Omni's raw per-sample shape ("" writes none).
	SaveRawDir string `json:"save_raw_dir"`
	// Task is what each request asks for and how it is scored: TaskASR
	// ("asr", the default) or TaskTranscribeDiarize (capture/diarize.go).
	Task string `json:"task"`
	// Proxy mode (docs/PROXY.md): no load of asrprof's own; the capture
	// records the requests that the user's client sends through a reverse
	// proxy listening at Proxy, for Command's lifetime (asrprof starts it)
	// or Duration (below; 0: until stopped). ProxyLevels names the client's
	// levels in order (empty: inferred); LevelGap is the idle time that
	// ends a phase (0: proxy.DefaultGap).
	Proxy       string        `json:"proxy"`
	ProxyLevels []string      `json:"proxy_levels"`
	LevelGap    time.Duration `json:"level_gap_s"`
	Command     []string      `json:"command"`
	// Probes-only captures and remote probes (asrprof serve, docs/SCALE.md).
	// ProbesOnly runs the probes without a driver, in periods of Period
	// (0: DefaultPeriod) until Duration ends (0: until stopped).
	// Duration also ends a proxy capture (see the proxy block).
	ProbesOnly bool          `json:"probes_only"`
	Duration   time.Duration `json:"duration_s"`
	Period     time.Duration `json:"period_s"`
	// Agents are `asrprof serve` daemons on the servers' hosts that run
	// the probes of a driven capture (--agent); the probes then run there
	// and not here, and their data comes back into the bundle at the end.
	Agents []string `json:"agents"`
	// AgentToken is the bearer token the agents ask for (--agent-token).
	AgentToken string `json:"-"`
	// Capacity (docs/CAPACITY.md): the per-request limits goodput is
	// counted under (--slo; empty: no goodput), and the --find-max search
	// (nil: the levels are run as listed).
	SLO    summary.SLO `json:"slo"`
	Search *Search     `json:"search"`
	// A pass's length and a replayed schedule (capture/passlen.go,
	// capture/replay.go, docs/REPLAY.md): PassRequests > 0 requests a
	// pass, or sending for PassDuration > 0, cycling the dataset (neither:
	// the dataset once); Arrivals "replay:FILE" replays a trace's arrival
	// times, divided by ReplaySpeed (0: 1).
	PassRequests int           `json:"pass_requests"`
	PassDuration time.Duration `json:"pass_duration_s"`
	ReplaySpeed  float64       `json:"replay_speed"`
}

// DefaultPeriod is the length of one probe period of a probes-only
// capture.
const DefaultPeriod = 5 * time.Second

// MarshalJSON writes c as the manifest records it: the json fields of
// Config, durations in seconds.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(option.Fields(c)) }

// Record is c as manifest.json's "config" holds it (MarshalJSON), as a
// JSON object; numbers keep their digits (json.Number).
func (c Config) Record() (map[string]any, error) {
	c.Command = secret.Args(c.Command) // a proxy's client command: its credentials are not recorded
	return option.Record(c)
}

// DefaultLevels are the closed-loop concurrency levels of a capture that
// names neither levels nor rates.
var DefaultLevels = []int{1, 8, 16, 32, 64}

// DefaultConfig is the configuration of a capture that sets nothing but
// its target and dataset (the CLI's flag defaults). Levels and Out are
// left empty: SetDefaults fills them once the rest is known.
func DefaultConfig() Config {
	return Config{
		Protocol:              "openai",
		Lang:                  "en",
		Arrivals:              load.Poisson,
		Seed:                  1,
		Repeats:               3,
		Timeout:               120 * time.Second,
		Grace:                 5 * time.Second,
		ReadyTimeout:          2 * time.Minute,
		Format:                "text",
		Probes:                []string{"auto"},
		ProcHz:                10,
		CPUHz:                 99,
		CPUEngine:             "auto",
		GPMWindow:             time.Second,
		ServerMetrics:         "auto",
		ServerMetricsInterval: 500 * time.Millisecond,
		OTLPHTTP:              "127.0.0.1:4318",
		OTLPGRPC:              "127.0.0.1:4317",
		SpanGrace:             5 * time.Second,
		ChunkMs:               100,
		Pace:                  protocol.PaceRealtime,
		Loops:                 1,
		Dialect:               protocol.DialectOpenAI,
		Task:                  TaskASR,
		Period:                DefaultPeriod,
		ReplaySpeed:           1,
	}
}

// SetDefaults fills what depends on the rest of c: the DefaultLevels when
// c names no concurrency and no rate, Out, runs/<date>-<time> of now, when
// empty, and the model name transcribe-diarize's client sends when --model
// is not set.
func (c *Config) SetDefaults(now time.Time) {
	if t := trimAPIPath(c.Target); t != c.Target && !protocol.IsRealtime(c.Protocol) {
		c.TargetGiven, c.Target = c.Target, t
	}
	if len(c.Concurrency) == 0 && len(c.Rates) == 0 && c.Proxy == "" && !c.ProbesOnly && c.ReplayFile() == "" {
		c.Concurrency = slices.Clone(DefaultLevels)
		if c.Search != nil {
			c.Concurrency = []int{1} // the search starts at one request in flight
		}
	}
	c.Out = cmp.Or(c.Out, "runs/"+now.Format("20060102-150405"))
	if c.Task == TaskTranscribeDiarize {
		c.Model = cmp.Or(c.Model, protocol.DiarizeModel)
	}
}

// trimAPIPath is target without a trailing /v1 or /v1/audio/transcriptions,
// which the openai protocols, the health check and /v1/models add.
func trimAPIPath(target string) string {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return target
	}
	p := strings.TrimRight(u.Path, "/")
	for _, suffix := range []string{"/v1/audio/transcriptions", "/v1"} {
		if strings.HasSuffix(p, suffix) {
			u.Path = strings.TrimSuffix(p, suffix)
			return u.String()
		}
	}
	return target
}

// SweepPoint is one point of the sweep: a closed-loop level (Concurrency),
// an open-loop one (Rate), or the replay of a trace (neither). Its Name is
// the level's name in the bundle (c8, rate2, replay).
type SweepPoint struct {
	Name        string
	Concurrency int     // closed loop when > 0
	Rate        float64 // open loop when > 0
}

// Levels lists the sweep points in order: closed-loop levels, then open-loop ones.
func (c *Config) Levels() []SweepPoint {
	var out []SweepPoint
	if c.SoloAdded() {
		out = append(out, SweepPoint{Name: model.ConcurrencyLevel(1), Concurrency: 1})
	}
	for _, n := range c.Concurrency {
		out = append(out, SweepPoint{Name: model.ConcurrencyLevel(n), Concurrency: n})
	}
	for _, r := range c.Rates {
		out = append(out, SweepPoint{Name: model.RateLevel(r), Rate: r})
	}
	if c.ReplayFile() != "" {
		out = append(out, SweepPoint{Name: ReplayLevel}) // its rate comes with the trace (Session.passLevel)
	}
	return out
}

// SoloAdded reports whether Solo adds a c=1 level: asked for, a sweep of
// levels (not a search, a proxy or a replay) and no c=1 among them.
func (c *Config) SoloAdded() bool {
	return c.Solo && c.Search == nil && c.ReplayFile() == "" && len(c.Concurrency)+len(c.Rates) > 0 &&
		!slices.Contains(c.Concurrency, 1)
}

// ErrInvalidConfig wraps every error from Config.Validate.
var ErrInvalidConfig = errors.New("invalid configuration")

// Validate checks the configuration before anything touches the network.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}

// errIf is the error that format and args say when bad, else nil: one
// rule of the configuration. The validate methods list their rules in
// order, and cmp.Or picks the first that is broken.
func errIf(bad bool, format string, args ...any) error {
	if bad {
		return fmt.Errorf(format, args...)
	}
	return nil
}

func (c *Config) validate() error {
	if err := c.validateRemote(); err != nil {
		return err
	}
	if c.Proxy != "" {
		return c.validateProxy()
	}
	if c.ProbesOnly {
		return c.validateProbesOnly()
	}
	realtime := protocol.IsRealtime(c.Protocol)
	u, err := url.Parse(c.Target)
	badTarget := err != nil || u.Host == "" || !(u.Scheme == "http" || u.Scheme == "https" || (realtime && (u.Scheme == "ws" || u.Scheme == "wss")))
	if err := cmp.Or(
		errIf(c.Target == "", "--target is required (e.g. --target http://127.0.0.1:8000)"),
		errIf(badTarget && realtime, "--target %q: want an http(s) or ws(s) URL such as ws://127.0.0.1:10095", c.Target),
		errIf(badTarget, "--target %q: want an http(s) base URL such as http://127.0.0.1:8000", c.Target),
		errIf(c.Dataset == "", "--dataset is required (a manifest.jsonl, a Kaldi dir, or a folder of audio + .txt)"),
		errIf(!slices.Contains([]string{"openai", "openai-stream", "funasr-ws", "openai-realtime"}, c.Protocol),
			"--protocol %q: want openai, openai-stream, funasr-ws or openai-realtime", c.Protocol),
		c.validateRealtime(), c.validateTask(), c.validateLang(), c.validateHeaders(),
		errIf(c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "/"), "--endpoint %q: want a path such as /inference", c.Endpoint),
		errIf(c.Endpoint != "" && realtime, "--endpoint: the realtime protocols take their path from --target (ws://HOST:PORT/PATH)"),
		errIf(len(c.Concurrency) == 0 && len(c.Rates) == 0 && c.ReplayFile() == "", "give --concurrency and/or --rate (or --arrivals replay:FILE)"),
	); err != nil {
		return err
	}
	if i := slices.IndexFunc(c.Concurrency, func(n int) bool { return n < 1 }); i >= 0 {
		return fmt.Errorf("--concurrency %d: must be ≥ 1", c.Concurrency[i])
	}
	if i := slices.IndexFunc(c.Rates, func(r float64) bool { return r <= 0 }); i >= 0 {
		return fmt.Errorf("--rate %g: must be > 0 requests/s", c.Rates[i])
	}
	m, err := url.Parse(c.ServerMetrics)
	badMetrics := !slices.Contains([]string{"", "auto", "off"}, c.ServerMetrics) && (err != nil || (m.Scheme != "http" && m.Scheme != "https") || m.Host == "")
	return cmp.Or(
		errIf(c.Arrivals != load.Poisson && c.Arrivals != load.Constant && !isReplay(c.Arrivals), // replay: capture/replay.go
			"--arrivals %q: want poisson, constant or replay:FILE", c.Arrivals),
		c.validatePassLength(), // capture/passlen.go
		errIf(c.Repeats < 1, "--repeats %d: must be ≥ 1", c.Repeats),
		errIf(c.Timeout <= 0, "--timeout must be > 0"),
		c.validateOutput(),
		errIf(!slices.Contains([]string{"", "auto", "otel", "fp", "perf"}, c.CPUEngine), "--cpu-engine %q: want auto, otel, fp or perf", c.CPUEngine),
		errIf(c.CPUHz < 0 || c.CPUHz > 10000, "--cpu-hz %d: want 1 to 10000 samples per second (0: the default, 99)", c.CPUHz),
		errIf(badMetrics, "--server-metrics %q: want auto, off or an http(s) URL such as http://127.0.0.1:8000/metrics", c.ServerMetrics),
		errIf(c.ServerMetricsInterval != 0 && c.ServerMetricsInterval < 10*time.Millisecond,
			"--server-metrics-interval %v: want at least 10ms", c.ServerMetricsInterval),
		c.validateCapacity(),
	)
}

// EndpointURL is where the multipart protocols send their requests.
func (c *Config) EndpointURL() string {
	return strings.TrimRight(c.Target, "/") + cmp.Or(c.Endpoint, protocol.TranscriptionsPath)
}

// validateHeaders checks --header.
func (c *Config) validateHeaders() error {
	if _, err := option.ParseHeader(c.Headers); err != nil {
		return fmt.Errorf("--header: %w", err)
	}
	return nil
}

// header is --header as the clients send it. Validate has checked it; a
// header it would refuse is left out here.
func (c *Config) header() http.Header {
	h, _ := option.ParseHeader(c.Headers)
	return h
}

// validateRealtime checks the realtime knobs; zero values take defaults.
func (c *Config) validateRealtime() error {
	return cmp.Or(
		errIf(c.ChunkMs != 0 && (c.ChunkMs < 10 || c.ChunkMs > 10000), "--chunk-ms %d: want 10..10000", c.ChunkMs),
		errIf(!slices.Contains([]string{"", protocol.PaceRealtime, protocol.PaceNone}, c.Pace), "--pace %q: want realtime or none", c.Pace),
		errIf(c.Loops < 0, "--loops %d: must be ≥ 1", c.Loops),
		c.validateDialect(),
	)
}

// validateDialect checks --realtime-dialect.
func (c *Config) validateDialect() error {
	return errIf(!slices.Contains([]string{"", protocol.DialectOpenAI, protocol.DialectVLLM, protocol.DialectSGLangOmni}, c.Dialect),
		"--realtime-dialect %q: want openai, vllm or sglang-omni", c.Dialect)
}

// validateLang checks --lang, the normalizer of WER/CER (docs/SCORING.md).
func (c *Config) validateLang() error {
	return errIf(!slices.Contains([]string{"en", "zh"}, c.Lang), "--lang %q: want en or zh", c.Lang)
}

// validateOutput checks where the bundle goes and how its tables print.
func (c *Config) validateOutput() error {
	_, err := os.Stat(filepath.Join(c.Out, bundle.ManifestFile))
	return cmp.Or(
		errIf(c.Out == "", "--out is required"),
		errIf(err == nil && !c.Overwrite, "--out %s: %w (give --overwrite to replace it, or another --out)", c.Out, bundle.ErrExists),
		errIf(table.CheckFormat(c.Format) != nil, "--format %q: want text, markdown, csv, tsv or json", c.Format),
	)
}
