package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/asrprof/asrprof/trace/bundle"
)

// StagesFile is where SaveStages writes each request's derived stages; the
// trace exporters read it to add one span per stage (docs/JAEGER.md).
const StagesFile = bundle.StagesFile

// SaveStages runs the built-in stage_spans analysis with the session's
// options and writes its rows to the bundle's stages.jsonl, one line per
// stage of a request: {"trace_id","request_id","stage","start_unix_ns",
// "end_unix_ns"} on the server's clock. It returns how many lines it wrote.
func SaveStages(ctx context.Context, s *Session) (int, error) {
	tables, err := s.Run(ctx, "stage_spans")
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	n := 0
	for _, t := range tables {
		if t.Name != "stage_spans" {
			continue
		}
		col := map[string]int{}
		for i, c := range t.Columns {
			col[c] = i
		}
		for _, row := range t.Values {
			line := map[string]any{}
			for _, k := range []string{"request_id", "trace_id", "stage", "start_unix_ns", "end_unix_ns"} {
				line[k] = row[col[k]]
			}
			b, err := json.Marshal(line)
			if err != nil {
				return 0, fmt.Errorf("encoding a stage: %w", err)
			}
			buf.Write(b)
			buf.WriteByte('\n')
			n++
		}
	}
	b := &bundle.Bundle{Dir: s.c.Dir}
	tmp := b.Path(StagesFile + ".tmp")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, b.Path(StagesFile))
}
