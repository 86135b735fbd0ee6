package servermetrics

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// File is the bundle file the probe appends to.
const File = "server_metrics.jsonl"

// Kinds of the records in File.
const (
	KindSample = "sample" // one series in one scrape
	KindScrape = "scrape" // one successful scrape
	KindPeriod = "period" // one series over one pass
)

// Float is a sample value in JSON: a number, or the string "NaN", "+Inf"
// or "-Inf" (JSON has no such numbers).
type Float float64

// MarshalJSON writes f as a JSON number, or as a string when it is not
// finite.
func (f Float) MarshalJSON() ([]byte, error) {
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
func (f *Float) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*f = Float(math.NaN())
		case "+Inf":
			*f = Float(math.Inf(1))
		case "-Inf":
			*f = Float(math.Inf(-1))
		default:
			return fmt.Errorf("invalid value %q", s)
		}
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("invalid value %s", b)
	}
	*f = Float(v)
	return nil
}

// sampleRecord is a KindSample line.
type sampleRecord struct {
	Kind     string          `json:"kind"`
	TsUnixNs int64           `json:"ts_unix_ns"`
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Labels   json.RawMessage `json:"labels"`
	Value    Float           `json:"value"`
	// ExposedTsMs is the line's own timestamp, when the server sent one.
	ExposedTsMs *int64 `json:"exposed_ts_ms,omitempty"`
}

// scrapeRecord is a KindScrape line.
type scrapeRecord struct {
	Kind      string  `json:"kind"`
	TsUnixNs  int64   `json:"ts_unix_ns"`
	DurationS float64 `json:"duration_s"`
	Series    int     `json:"series"`
	Bytes     int     `json:"bytes"`
}

// periodRecord is a KindPeriod line.
type periodRecord struct {
	Kind        string          `json:"kind"`
	Level       string          `json:"level"`
	Repeat      int             `json:"repeat"`
	Warmup      bool            `json:"warmup"`
	StartUnixNs int64           `json:"start_unix_ns"`
	EndUnixNs   int64           `json:"end_unix_ns"`
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Labels      json.RawMessage `json:"labels"`
	Samples     int             `json:"samples"`
	// Gauges (and every series that is not cumulative).
	Mean *Float `json:"mean,omitempty"`
	Min  *Float `json:"min,omitempty"`
	Max  *Float `json:"max,omitempty"`
	Last *Float `json:"last,omitempty"`
	// Cumulative series (counters, histogram buckets, _sum, _count).
	Delta      *Float `json:"delta,omitempty"`
	RatePerS   *Float `json:"rate_per_s,omitempty"`
	Resets     int    `json:"resets,omitempty"`
	FromUnixNs int64  `json:"from_unix_ns,omitempty"`
	ToUnixNs   int64  `json:"to_unix_ns,omitempty"`
}

// Record is any line of File, for readers: the fields of every kind (those
// of other kinds are zero or nil).
type Record struct {
	Kind     string            `json:"kind"`
	TsUnixNs int64             `json:"ts_unix_ns"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Labels   map[string]string `json:"labels"`
	Value    *Float            `json:"value"`

	ExposedTsMs *int64  `json:"exposed_ts_ms"`
	DurationS   float64 `json:"duration_s"`
	Series      int     `json:"series"`
	Bytes       int     `json:"bytes"`

	Level       string `json:"level"`
	Repeat      int    `json:"repeat"`
	Warmup      bool   `json:"warmup"`
	StartUnixNs int64  `json:"start_unix_ns"`
	EndUnixNs   int64  `json:"end_unix_ns"`
	Samples     int    `json:"samples"`
	Mean        *Float `json:"mean"`
	Min         *Float `json:"min"`
	Max         *Float `json:"max"`
	Last        *Float `json:"last"`
	Delta       *Float `json:"delta"`
	RatePerS    *Float `json:"rate_per_s"`
	Resets      int    `json:"resets"`
	FromUnixNs  int64  `json:"from_unix_ns"`
	ToUnixNs    int64  `json:"to_unix_ns"`
}
