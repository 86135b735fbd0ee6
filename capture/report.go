package capture

import (
	"context"
	"fmt"
	"io"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/analysis/table"
	"github.com/asrprof/asrprof/bench/metrics"
	"github.com/asrprof/asrprof/trace"
)

// SweepTable builds the sweep table: one row per level, means over the
// scored repeats with the min–max range when there is more than one.
func SweepTable(res trace.Results) *table.Table {
	t := &table.Table{
		Name:    "sweep",
		Title:   "Sweep (mean over repeats; min–max in brackets)",
		Columns: []string{"level", "req/s", "RTFx", "latency mean (s)", "latency p95 (s)", "corpus WER", "completed"},
	}
	rng := func(s trace.Stat, f string) string {
		v := fmt.Sprintf(f, s.Mean)
		if s.N > 1 && s.Max != s.Min {
			v += fmt.Sprintf(" ["+f+"–"+f+"]", s.Min, s.Max)
		}
		return v
	}
	for _, r := range res.Results {
		level := r.Level
		if r.Concurrency > 0 {
			level = fmt.Sprintf("c=%d", r.Concurrency)
		} else if r.Rate > 0 {
			level = fmt.Sprintf("rate=%g/s", r.Rate)
		}
		var rps []float64
		for _, p := range r.PerRepeat {
			rps = append(rps, p.RequestsPerS)
		}
		rpsStat := metrics.StatOf(rps)
		done := r.Total - r.Failed
		t.Rows = append(t.Rows, []string{
			level,
			rng(rpsStat, "%.2f"),
			rng(r.RTFx, "%.2f"),
			rng(r.LatencyMeanS, "%.3f"),
			rng(r.LatencyP95S, "%.3f"),
			rng(r.CorpusWER, "%.4f"),
			fmt.Sprintf("%d/%d", done, r.Total),
		})
		t.Values = append(t.Values, []any{
			r.Level, rpsStat.Mean, r.RTFx.Mean, r.LatencyMeanS.Mean, r.LatencyP95S.Mean, r.CorpusWER.Mean,
			fmt.Sprintf("%d/%d", done, r.Total),
		})
	}
	return t
}

// printTables prints the sweep table and then the default analyses of the
// bundle (stages, bottleneck, gpu, cpu where the data exists), as one
// document in format. A failing analysis is reported, not fatal.
func printTables(ctx context.Context, w, errw io.Writer, format string, out *Outcome) error {
	t := SweepTable(out.Results)
	t.Notes = append(t.Notes, IncompleteNotes(out.Manifest)...)
	t.Notes = append(t.Notes, out.Manifest.Notes...)
	tables := []*table.Table{t}
	more, err := analysis.DefaultTables(ctx, out.Dir, "sweep")
	if err != nil {
		fmt.Fprintf(errw, "asrprof: analysis: %v\n", err)
	}
	tables = append(tables, more...)
	return table.Render(w, format, tables...)
}

// IncompleteNotes explains, one line each, why a capture is not complete.
func IncompleteNotes(m trace.Manifest) []string {
	if m.Complete {
		return nil
	}
	notes := []string{"INCOMPLETE: these numbers do not cover the whole workload"}
	if !m.Finished && len(m.Incomplete) == 0 {
		notes = append(notes, "  the capture did not finish (killed?): the bundle holds what was recorded before it stopped")
	}
	for _, r := range m.Incomplete {
		notes = append(notes, "  "+r)
	}
	return notes
}
