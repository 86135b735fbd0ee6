package analysis

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/table"
)

// StageMeans reads the stage table (the stages analysis, t; nil: none):
// its stage columns in order (the preset's stages, "total" among them)
// and, per level, each stage's mean ms in that order (NaN where the level
// has none).
func StageMeans(t *table.Table) (stages []string, means map[string][]float64) {
	if t == nil {
		return nil, nil
	}
	var idx []int
	for i, c := range t.Columns {
		if c != "level" {
			stages, idx = append(stages, c), append(idx, i)
		}
	}
	levels, _ := table.Decode[struct {
		Level string `col:"level"`
	}](t)
	means = map[string][]float64{}
	for r, lv := range levels {
		vs := make([]float64, len(idx))
		for k, i := range idx {
			vs[k] = math.NaN()
			m, _ := t.Values[r][i].(map[string]any) // nil for a stage the level lacks: its mean_ms is nil, NaN
			if ms, ok := table.Number(m["mean_ms"]); ok {
				vs[k] = ms
			}
		}
		means[lv.Level] = vs
	}
	return stages, means
}

// StageRecord is one derived stage of one request, on the server's
// clock: a row of the stage_spans analysis.
type StageRecord struct {
	Request     int    `col:"request_index"` // its index in requests.jsonl
	Stage       string `col:"stage"`
	StartUnixNs int64  `col:"start_unix_ns"`
	EndUnixNs   int64  `col:"end_unix_ns"`
}

// StageRecords runs the built-in stage_spans analysis with the session's
// options (its stage preset) and returns its rows, each request's in
// order of start: every server stage of every measured request that the
// preset bounds, the boundaries of tables/stages.parquet. `asrprof
// export` draws them, one slice or span per stage.
func StageRecords(ctx context.Context, s *Session) ([]StageRecord, error) {
	tables, err := s.Run(ctx, "stage_spans")
	if err != nil {
		return nil, err
	}
	var out []StageRecord
	for _, t := range tables {
		if t.Name != "stage_spans" {
			continue
		}
		rs, err := table.Decode[StageRecord](t)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	slices.SortStableFunc(out, func(a, b StageRecord) int {
		return cmp.Or(cmp.Compare(a.Request, b.Request), cmp.Compare(a.StartUnixNs, b.StartUnixNs))
	})
	return out, nil
}

// Attribution runs the built-in attribution analysis with the session's
// options and returns what it computed: every successful request's
// latency, state by state, its states placed in time (engine.Attribute
// with Segments; docs/ANALYSIS.md "Where the time went").
func Attribution(ctx context.Context, s *Session) (*engine.Attribution, error) {
	s.c.PlaceStates()
	if _, err := s.Run(ctx, "attribution"); err != nil {
		return nil, err
	}
	a := s.c.LastAttribution()
	if a == nil {
		return nil, errors.New("the attribution analysis computed no attribution")
	}
	return a, nil
}

// BlackBox returns the capture's black-box attribution (the blackbox
// module's: every successful request's latency seen from outside, its
// states placed in time; docs/ANALYSIS.md "Seen from outside"), computed
// once.
func (c *Capture) BlackBox() (*engine.BlackBoxResult, error) {
	bb, err := c.blackbox()
	if err != nil {
		return nil, err
	}
	return bb.r, nil
}
