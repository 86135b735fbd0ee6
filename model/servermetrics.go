package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Kinds of the lines of server_metrics.jsonl (ServerMetricsRecord.Kind),
// which the metrics probe (probe/servermetrics) writes and the
// servermetrics analysis (analysis/engine) reads; docs/BUNDLE.md.
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
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *MetricValue) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*f = MetricValue(math.NaN())
		case "+Inf":
			*f = MetricValue(math.Inf(1))
		case "-Inf":
			*f = MetricValue(math.Inf(-1))
		default:
			return fmt.Errorf("invalid value %q", s)
		}
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("invalid value %s", b)
	}
	*f = MetricValue(v)
	return nil
}

// ServerMetricsRecord is any line of server_metrics.jsonl, for readers:
// the fields of every kind (those of other kinds are zero or nil).
//
// A sample line (MetricsKindSample) is one series (Name, Labels; Type is
// its family's TYPE) whose Value changed since the previous scrape, at
// TsUnixNs, the time its scrape was sent; the scrape's own line
// (MetricsKindScrape, same TsUnixNs) follows its samples, so a series'
// value in a scrape is its newest sample at or before it. A histogram's
// _bucket (label le), _sum and _count are series like any other.
//
// A period line (MetricsKindPeriod) summarises one series over one pass
// (Level, Repeat, Warmup, StartUnixNs, EndUnixNs): a cumulative series
// (counter, histogram _bucket/_sum/_count) by its increase Delta from the
// newest scrape before the pass (FromUnixNs) to the first scrape sent
// after it ended (ToUnixNs), counting Resets; any other series by Mean,
// Min, Max and Last over the Samples scrapes sent inside the pass.
type ServerMetricsRecord struct {
	Kind     string            `json:"kind"`
	TsUnixNs int64             `json:"ts_unix_ns"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Labels   map[string]string `json:"labels"`
	Value    *MetricValue      `json:"value"`

	ExposedTsMs *int64  `json:"exposed_ts_ms"`
	DurationS   float64 `json:"duration_s"`
	Series      int     `json:"series"`
	Bytes       int     `json:"bytes"`

	Level       string       `json:"level"`
	Repeat      int          `json:"repeat"`
	Warmup      bool         `json:"warmup"`
	StartUnixNs int64        `json:"start_unix_ns"`
	EndUnixNs   int64        `json:"end_unix_ns"`
	Samples     int          `json:"samples"`
	Mean        *MetricValue `json:"mean"`
	Min         *MetricValue `json:"min"`
	Max         *MetricValue `json:"max"`
	Last        *MetricValue `json:"last"`
	Delta       *MetricValue `json:"delta"`
	RatePerS    *MetricValue `json:"rate_per_s"`
	Resets      int          `json:"resets"`
	FromUnixNs  int64        `json:"from_unix_ns"`
	ToUnixNs    int64        `json:"to_unix_ns"`
}
