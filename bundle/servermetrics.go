package bundle

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// ServerMetricsFile holds the server's own Prometheus /metrics, scraped
// by the metrics probe (probe/servermetrics) and read by the servermetrics
// analysis (analysis/engine): one ServerMetricsRecord a line.
const ServerMetricsFile = "server_metrics.jsonl"

// Kinds of the lines of server_metrics.jsonl (ServerMetricsRecord.Kind);
// docs/BUNDLE.md.
const (
	MetricsKindSample = "sample" // one series in one scrape (written when its value changed)
	MetricsKindScrape = "scrape" // one successful scrape
	MetricsKindPeriod = "period" // one series over one pass
)

// MetricValue is a sample value in JSON: a number, or the string "NaN",
// "+Inf" or "-Inf" (JSON has no such numbers).
type MetricValue float64

// MarshalJSON writes f as a JSON number, or as a string when it is not
// finite.
func (f MetricValue) MarshalJSON() ([]byte, error) {
	b := strconv.AppendFloat(nil, float64(f), 'g', -1, 64) // NaN, +Inf and -Inf as named above
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return strconv.AppendQuote(nil, string(b)), nil
	}
	return b, nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *MetricValue) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s != "NaN" && s != "+Inf" && s != "-Inf" {
			return fmt.Errorf("invalid value %q", s)
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("invalid value %s", b)
	}
	*f = MetricValue(v)
	return nil
}

// ServerMetricsRecord is a line of server_metrics.jsonl, of any kind:
// the writer fills the fields of its kind, and a field that is zero is
// left out of the line (readers read it as zero).
//
// A sample line (MetricsKindSample) is one series (Name, Labels; Type is
// its family's TYPE) whose Value changed since the previous scrape, at
// TsUnixNs, the time its scrape was sent, with ExposedTsMs when the server
// gave the line a timestamp; the scrape's own line (MetricsKindScrape,
// same TsUnixNs, with DurationS, Series and Bytes) follows its samples, so
// a series' value in a scrape is its newest sample at or before it. A
// histogram's _bucket (label le), _sum and _count are series like any
// other.
//
// A period line (MetricsKindPeriod) summarises one series over one pass
// (Level, Repeat, Warmup, StartUnixNs, EndUnixNs): a cumulative series
// (counter, histogram _bucket/_sum/_count) by its increase Delta from the
// newest scrape before the pass (FromUnixNs) to the first scrape sent
// after it ended (ToUnixNs), counting Resets; any other series by Mean,
// Min, Max and Last over the Samples scrapes sent inside the pass.
type ServerMetricsRecord struct {
	Kind     string `json:"kind"`
	TsUnixNs int64  `json:"ts_unix_ns,omitempty"`

	Level       string `json:"level,omitempty"`
	Repeat      int    `json:"repeat,omitempty"`
	Warmup      bool   `json:"warmup,omitempty"`
	StartUnixNs int64  `json:"start_unix_ns,omitempty"`
	EndUnixNs   int64  `json:"end_unix_ns,omitempty"`

	Name        string       `json:"name,omitempty"`
	Type        string       `json:"type,omitempty"`
	Labels      MetricLabels `json:"labels,omitzero"`
	Value       *MetricValue `json:"value,omitempty"`
	ExposedTsMs *int64       `json:"exposed_ts_ms,omitempty"`

	DurationS float64 `json:"duration_s,omitempty"`
	Series    int     `json:"series,omitempty"`
	Bytes     int     `json:"bytes,omitempty"`

	Samples    int          `json:"samples,omitempty"`
	Mean       *MetricValue `json:"mean,omitempty"`
	Min        *MetricValue `json:"min,omitempty"`
	Max        *MetricValue `json:"max,omitempty"`
	Last       *MetricValue `json:"last,omitempty"`
	Delta      *MetricValue `json:"delta,omitempty"`
	RatePerS   *MetricValue `json:"rate_per_s,omitempty"`
	Resets     int          `json:"resets,omitempty"`
	FromUnixNs int64        `json:"from_unix_ns,omitempty"`
	ToUnixNs   int64        `json:"to_unix_ns,omitempty"`
}

// MetricLabels are a series' labels, an object in JSON ({} when none; a
// bucket's le is one). Readers read Map; the probe, which encodes a
// series' labels once, writes JSON (Map is written when JSON is nil).
type MetricLabels struct {
	Map  map[string]string
	JSON json.RawMessage
}

// IsZero reports whether l holds no label set at all (a scrape line's).
func (l MetricLabels) IsZero() bool { return l.Map == nil && l.JSON == nil }

// MarshalJSON writes l.JSON, else l.Map.
func (l MetricLabels) MarshalJSON() ([]byte, error) {
	if l.JSON != nil {
		return l.JSON, nil
	}
	return json.Marshal(l.Map)
}

// UnmarshalJSON reads an object into l.Map.
func (l *MetricLabels) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &l.Map) }
