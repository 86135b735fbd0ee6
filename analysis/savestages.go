package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/trace/bundle"
)

// StagesFile is where SaveStages writes each request's derived stages; the
// trace exporters read it to add one span per stage (docs/JAEGER.md).
const StagesFile = bundle.StagesFile

// StageLine is one derived stage of one request, on the server's clock:
// one line of stages.jsonl.
type StageLine struct {
	RequestID   string `json:"request_id"`
	TraceID     string `json:"trace_id"`
	Stage       string `json:"stage"`
	StartUnixNs int64  `json:"start_unix_ns"`
	EndUnixNs   int64  `json:"end_unix_ns"`
}

// StageLines runs the built-in stage_spans analysis with the session's
// options and returns its rows: every stage of every measured request
// that the stage preset bounds. SaveStages writes them; `asrprof export`
// computes them when a bundle has no stages.jsonl.
func StageLines(ctx context.Context, s *Session) ([]StageLine, error) {
	tables, err := s.Run(ctx, "stage_spans")
	if err != nil {
		return nil, err
	}
	var out []StageLine
	for _, t := range tables {
		if t.Name != "stage_spans" {
			continue
		}
		col := map[string]int{}
		for i, c := range t.Columns {
			col[c] = i
		}
		for _, row := range t.Values {
			l := StageLine{}
			l.RequestID, _ = row[col["request_id"]].(string)
			l.TraceID, _ = row[col["trace_id"]].(string)
			l.Stage, _ = row[col["stage"]].(string)
			l.StartUnixNs = toInt64(row[col["start_unix_ns"]])
			l.EndUnixNs = toInt64(row[col["end_unix_ns"]])
			out = append(out, l)
		}
	}
	return out, nil
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	case float64:
		return int64(x)
	case json.Number:
		n, _ := x.Int64()
		return n
	}
	return 0
}

// SaveStages writes StageLines to the bundle's stages.jsonl, one line per
// stage of a request: {"request_id","trace_id","stage","start_unix_ns",
// "end_unix_ns"} on the server's clock. It returns how many lines it wrote.
func SaveStages(ctx context.Context, s *Session) (int, error) {
	lines, err := StageLines(ctx, s)
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			return 0, fmt.Errorf("encoding a stage: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	b := &bundle.Bundle{Dir: s.c.Dir}
	tmp := b.Path(StagesFile + ".tmp")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return 0, err
	}
	return len(lines), os.Rename(tmp, b.Path(StagesFile))
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
