// Package capture runs a capture session: it checks the dataset and the
// target, opens the bundle, starts the probes, drives every level and
// repeat through bench, and finalizes the bundle. It wires packages
// together and holds no protocol or probe details of its own.
package capture

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/asrprof/asrprof/bench/load"
	"github.com/asrprof/asrprof/bench/protocol"
)

// Config is everything `asrprof capture` was asked to do. It is recorded in
// the manifest as given.
type Config struct {
	Target      string        `json:"target"`
	Dataset     string        `json:"dataset"`
	Protocol    string        `json:"protocol"`
	Model       string        `json:"model"`
	Lang        string        `json:"lang"`
	Concurrency []int         `json:"concurrency,omitempty"`
	Rates       []float64     `json:"rates,omitempty"`
	Arrivals    load.Arrivals `json:"arrivals,omitempty"`
	Seed        uint64        `json:"seed"`
	Repeats     int           `json:"repeats"`
	Warmup      bool          `json:"warmup"`
	MaxSamples  int           `json:"max_samples,omitempty"`
	Timeout     time.Duration `json:"timeout_ns"`
	Grace       time.Duration `json:"grace_ns"`
	// ReadyTimeout bounds the wait for a /health that answers but is not
	// yet 200 (a server loading its model).
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	Out          string        `json:"out"`
	Overwrite    bool          `json:"overwrite"`
	Format       string        `json:"format"`
	SkipBad      bool          `json:"skip_bad"`
	// Probes lists the probes to run ("auto": every one this machine
	// supports; "none": no probes).
	Probes []string `json:"probes"`
	// PID is the server's process; 0 finds it from the target's port.
	PID    int     `json:"pid"`
	ProcHz float64 `json:"proc_hz"`
	CPUHz  int     `json:"cpu_hz"`
	// CPUEngine is the cpu probe's engine: "auto" (""), "otel" or "fp".
	CPUEngine string `json:"cpu_engine,omitempty"`
	// BPFStats turns on the kernel's BPF run-time statistics for the
	// capture, to measure and record the probes' in-kernel cost.
	BPFStats bool `json:"bpf_stats,omitempty"`
	// GPU probe: which GPUs (nil: all), the GPM window, PCIe throughput.
	GPUs      []int         `json:"gpus,omitempty"`
	GPMWindow time.Duration `json:"gpm_window_ns,omitempty"`
	GPUPCIe   bool          `json:"gpu_pcie,omitempty"`
	// OTLP receiver addresses ("off" disables one) and whether a
	// non-loopback address is allowed.
	OTLPHTTP        string `json:"otlp_http"`
	OTLPGRPC        string `json:"otlp_grpc"`
	OTLPAllowRemote bool   `json:"otlp_allow_remote"`
	// SpanGrace bounds the wait for spans that arrive after the last request.
	SpanGrace time.Duration `json:"span_grace_ns"`
	// EventsDir holds SGLang-Omni request-profile event files to import;
	// ProfileURL is a server whose request profiler the capture starts and
	// stops itself.
	EventsDir  string `json:"events_dir"`
	ProfileURL string `json:"profile_url"`
	Quiet      bool   `json:"quiet"`

	// Realtime protocols (funasr-ws, openai-realtime), docs/REALTIME.md:
	// audio per frame, pacing (realtime or none), loops of the audio
	// within a session, the openai-realtime dialect, and Fun-ASR hotwords.
	ChunkMs  int      `json:"chunk_ms,omitempty"`
	Pace     string   `json:"pace,omitempty"`
	Loops    int      `json:"loops,omitempty"`
	Dialect  string   `json:"realtime_dialect,omitempty"`
	Hotwords []string `json:"hotwords,omitempty"`
}

// Level is one point of the sweep.
type Level struct {
	Name        string
	Concurrency int     // closed loop when > 0
	Rate        float64 // open loop when > 0
}

// Levels lists the sweep points in order: closed-loop levels, then open-loop ones.
func (c *Config) Levels() []Level {
	var out []Level
	for _, n := range c.Concurrency {
		out = append(out, Level{Name: fmt.Sprintf("c%d", n), Concurrency: n})
	}
	for _, r := range c.Rates {
		out = append(out, Level{Name: "r" + strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", r), "0"), "."), Rate: r})
	}
	return out
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

func (c *Config) validate() error {
	if c.Target == "" {
		return fmt.Errorf("--target is required (e.g. --target http://127.0.0.1:8000)")
	}
	realtime := protocol.IsRealtime(c.Protocol)
	u, err := url.Parse(c.Target)
	okScheme := u != nil && (u.Scheme == "http" || u.Scheme == "https" || (realtime && (u.Scheme == "ws" || u.Scheme == "wss")))
	if err != nil || !okScheme || u.Host == "" {
		if realtime {
			return fmt.Errorf("--target %q: want an http(s) or ws(s) URL such as ws://127.0.0.1:10095", c.Target)
		}
		return fmt.Errorf("--target %q: want an http(s) base URL such as http://127.0.0.1:8000", c.Target)
	}
	if c.Dataset == "" {
		return fmt.Errorf("--dataset is required (a manifest.jsonl, a Kaldi dir, or a folder of audio + .txt)")
	}
	switch c.Protocol {
	case "openai", "openai-stream", "funasr-ws", "openai-realtime":
	default:
		return fmt.Errorf("--protocol %q: want openai, openai-stream, funasr-ws or openai-realtime", c.Protocol)
	}
	if err := c.validateRealtime(); err != nil {
		return err
	}
	switch c.Lang {
	case "en", "zh":
	default:
		return fmt.Errorf("--lang %q: want en or zh", c.Lang)
	}
	if len(c.Concurrency) == 0 && len(c.Rates) == 0 {
		return fmt.Errorf("give --concurrency and/or --rate")
	}
	for _, n := range c.Concurrency {
		if n < 1 {
			return fmt.Errorf("--concurrency %d: must be ≥ 1", n)
		}
	}
	for _, r := range c.Rates {
		if r <= 0 {
			return fmt.Errorf("--rate %g: must be > 0 requests/s", r)
		}
	}
	switch c.Arrivals {
	case load.Poisson, load.Constant:
	default:
		return fmt.Errorf("--arrivals %q: want poisson or constant", c.Arrivals)
	}
	if c.Repeats < 1 {
		return fmt.Errorf("--repeats %d: must be ≥ 1", c.Repeats)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--timeout must be > 0")
	}
	if c.Out == "" {
		return fmt.Errorf("--out is required")
	}
	switch c.Format {
	case "table", "markdown", "csv", "json":
	default:
		return fmt.Errorf("--format %q: want table, markdown, csv or json", c.Format)
	}
	switch c.CPUEngine {
	case "", "auto", "otel", "fp":
	default:
		return fmt.Errorf("--cpu-engine %q: want auto, otel or fp", c.CPUEngine)
	}
	if c.CPUHz < 0 || c.CPUHz > 10000 {
		return fmt.Errorf("--cpu-hz %d: want 1 to 10000 samples per second (0: the default, 99)", c.CPUHz)
	}
	return nil
}

// validateRealtime checks the realtime knobs; zero values take defaults.
func (c *Config) validateRealtime() error {
	if c.ChunkMs != 0 && (c.ChunkMs < 10 || c.ChunkMs > 10000) {
		return fmt.Errorf("--chunk-ms %d: want 10..10000", c.ChunkMs)
	}
	switch c.Pace {
	case "", protocol.PaceRealtime, protocol.PaceNone:
	default:
		return fmt.Errorf("--pace %q: want realtime or none", c.Pace)
	}
	if c.Loops < 0 {
		return fmt.Errorf("--loops %d: must be ≥ 1", c.Loops)
	}
	switch c.Dialect {
	case "", protocol.DialectOpenAI, protocol.DialectVLLM, protocol.DialectSGLangOmni:
	default:
		return fmt.Errorf("--realtime-dialect %q: want openai, vllm or sglang-omni", c.Dialect)
	}
	if c.Protocol == "openai-realtime" && c.Dialect == protocol.DialectVLLM && c.Model == "" {
		return fmt.Errorf("--realtime-dialect vllm needs --model (vLLM's session.update requires it)")
	}
	return nil
}
