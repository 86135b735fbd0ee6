package model

// LagSeries is one realtime session's update lags over its session time,
// a line of realtime_lags.jsonl (docs/BUNDLE.md, docs/REALTIME.md): for
// each non-final update that carried text, in arrival order, when it
// arrived (AtS: seconds from the session's audio origin) and its lag
// (LagS: that time minus the audio the update covers). Its summary is the
// request record's lag_p95_s, lag_max_s and lag_growth_s.
type LagSeries struct {
	ID       string    `json:"id"` // the request record's id
	SampleID string    `json:"sample_id"`
	Level    string    `json:"level"`
	Repeat   int       `json:"repeat"`
	Warmup   bool      `json:"warmup,omitempty"`
	Source   string    `json:"lag_source,omitempty"` // server, sent or mixed, as the record's
	AtS      []float64 `json:"at_s"`
	LagS     []float64 `json:"lag_s"`
}
