package servermetrics

import (
	"encoding/json"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// File is the bundle file the probe appends to.
const File = bundle.ServerMetricsFile

// Kinds of the records in File.
const (
	KindSample = model.MetricsKindSample // one series in one scrape
	KindScrape = model.MetricsKindScrape // one successful scrape
	KindPeriod = model.MetricsKindPeriod // one series over one pass
)

// Float is a sample value in JSON: a number, or the string "NaN", "+Inf"
// or "-Inf" (JSON has no such numbers). It is model.MetricValue, the one
// type that the probe writes and the analyses read.
type Float = model.MetricValue

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

// Record is any line of File, for readers: model.ServerMetricsRecord,
// the record's one home, which the analyses read too.
type Record = model.ServerMetricsRecord
