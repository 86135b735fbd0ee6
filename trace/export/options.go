package export

import (
	"time"

	"github.com/asrprof/asrprof/option"
)

// Settings is what `asrprof export` is asked: where to send or write a
// bundle's traces, and the OTLP exporter's knobs (OTLPConfig). Options
// sets it; DefaultSettings is what a user who sets nothing gets.
type Settings struct {
	OTLP, Perfetto string
	Sample, Batch  int
	RateLimit      float64
	Timeout        time.Duration
	Quiet          bool
}

// DefaultSettings are the exporters' defaults.
func DefaultSettings() Settings {
	return Settings{Sample: 1, Batch: DefaultBatchSpans, RateLimit: DefaultRateLimit, Timeout: DefaultTimeout}
}

// Options lists `asrprof export`'s own options; they set a Settings.
func Options() []option.Option {
	return []option.Option{
		{Name: "otlp", Field: "OTLP", Usage: "send to the OTLP/HTTP endpoint `URL` (e.g. http://127.0.0.1:4318; /v1/traces is added when absent)"},
		{Name: "perfetto", Field: "Perfetto", Usage: "write Chrome trace-event JSON to `FILE` (- for stdout)"},
		{Name: "sample", Field: "Sample", Usage: "OTLP: export one request in `N`, with its whole trace"},
		{Name: "rate-limit", Field: "RateLimit", Usage: "OTLP: at most this many `spans/s` on average (0: no limit)"},
		{Name: "batch", Field: "Batch", Usage: "OTLP: at most `N` spans per export request"},
		{Name: "timeout", Field: "Timeout", Usage: "OTLP: time limit of one export request"},
		option.Quiet(""),
	}
}
