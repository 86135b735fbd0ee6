package runbook

import (
	"fmt"
	"strings"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/table"
)

// Verdict says whether the scored runs cover the whole workload.
type Verdict struct {
	// Complete is true only when every planned scored run ran, finished,
	// and has evaluated == total, skipped == 0 and failed == 0 at every
	// level and repeat (capture's Manifest.Complete and Finished).
	Complete bool  `json:"complete"`
	Scored   int   `json:"scored_runs"`
	Gaps     []Gap `json:"gaps,omitempty"`
}

// Gap is one piece of missing coverage.
type Gap struct {
	Run    string `json:"run"`             // sub-bundle, e.g. run-2 or B-1
	Level  string `json:"level,omitempty"` // e.g. c8; "" for the whole run
	Repeat int    `json:"repeat,omitempty"`
	What   string `json:"what"`
}

// MetricSummary is one metric of one level over the scored runs (of one
// side in an A/B session): each run contributes its own mean over its
// repeats.
type MetricSummary struct {
	Side   string    `json:"side,omitempty"`
	Level  string    `json:"level"`
	Metric string    `json:"metric"`
	N      int       `json:"n"`
	Mean   float64   `json:"mean"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	StdDev float64   `json:"stddev"` // sample standard deviation; 0 when n < 2
	Values []float64 `json:"values"`
	Runs   []string  `json:"runs"`
}

// levelValue is a level's value of the metric key: its mean over the
// level's repeats, as results.json's per-level mean.
func levelValue(r model.LevelResult, key string) float64 {
	return stats.Mean(summary.LevelValues(r, key))
}

// Judge returns the verdict over the scored runs of recs, given the levels
// and repeats every run was asked for.
func Judge(recs []RunRecord, planned []RunSpec, levels []capture.SweepPoint, repeats int) Verdict {
	v := Verdict{}
	done := map[string]bool{}
	for _, r := range recs {
		done[r.Dir] = true
		if !r.Scored {
			continue
		}
		v.Scored++
		v.Gaps = append(v.Gaps, runGaps(r, levels, repeats)...)
	}
	for _, p := range planned {
		if p.Scored && !done[p.Dir] {
			v.Gaps = append(v.Gaps, Gap{Run: p.Dir, What: "not run (the runbook stopped before it)"})
		}
	}
	v.Complete = len(v.Gaps) == 0 && v.Scored > 0
	return v
}

// runGaps lists what one scored run is missing.
func runGaps(r RunRecord, levels []capture.SweepPoint, repeats int) []Gap {
	if !r.ran {
		what := "no capture"
		if r.Error != "" {
			e, _, _ := strings.Cut(firstLine(r.Error), "; last lines of")
			what += ": " + e
		}
		return []Gap{{Run: r.Dir, What: what}}
	}
	var gaps []Gap
	if !r.Finished {
		gaps = append(gaps, Gap{Run: r.Dir, What: "the capture did not finish (interrupted or killed)"})
	}
	byLevel := map[string]model.LevelResult{}
	for _, lr := range r.results.Results {
		byLevel[lr.Level] = lr
	}
	for _, lv := range levels {
		lr, ok := byLevel[lv.Name]
		if !ok {
			gaps = append(gaps, Gap{Run: r.Dir, Level: lv.Name, What: "level not run"})
			continue
		}
		if len(lr.PerRepeat) < repeats {
			gaps = append(gaps, Gap{Run: r.Dir, Level: lv.Name, What: fmt.Sprintf("%d of %d repeats ran", len(lr.PerRepeat), repeats)})
		}
		for _, p := range lr.PerRepeat {
			if what := capture.CoverageGap(p.Coverage); what != "" {
				gaps = append(gaps, Gap{Run: r.Dir, Level: lv.Name, Repeat: p.Repeat, What: what})
			}
		}
	}
	if len(gaps) == 0 && !r.Complete {
		// The manifest knows of a gap the results do not show (a bundle
		// write error, say): take its words.
		for _, s := range r.Incomplete {
			gaps = append(gaps, Gap{Run: r.Dir, What: s})
		}
		if len(r.Incomplete) == 0 {
			gaps = append(gaps, Gap{Run: r.Dir, What: "the manifest says incomplete"})
		}
	}
	return gaps
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Summarize returns, per level and metric, the statistics over the scored
// runs of recs whose side is side ("" outside A/B).
func Summarize(recs []RunRecord, side string, levels []capture.SweepPoint) []MetricSummary {
	var out []MetricSummary
	for _, lv := range levels {
		for _, m := range summary.Metrics(false) {
			s := MetricSummary{Side: side, Level: lv.Name, Metric: m.Key, Values: []float64{}, Runs: []string{}}
			for _, r := range recs {
				if !r.Scored || r.Side != side || !r.ran {
					continue
				}
				for _, lr := range r.results.Results {
					if lr.Level == lv.Name {
						s.Values = append(s.Values, levelValue(lr, m.Key))
						s.Runs = append(s.Runs, r.Dir)
					}
				}
			}
			if len(s.Values) == 0 {
				continue
			}
			st := summary.StatOf(s.Values)
			s.N, s.Mean, s.Min, s.Max = st.N, st.Mean, st.Min, st.Max
			s.StdDev, _ = stats.StdDev(s.Values)
			out = append(out, s)
		}
	}
	return out
}

// finish fills the verdict, summaries and comparison of rep.
func finish(rep *Report, cfg *Config) {
	levels := cfg.Capture.Levels()
	rep.Verdict = Judge(rep.Runs, cfg.Plan, levels, cfg.Capture.Repeats)
	rep.Summary = []MetricSummary{}
	if rep.Mode == "ab" {
		rep.Summary = append(rep.Summary, Summarize(rep.Runs, "A", levels)...)
		rep.Summary = append(rep.Summary, Summarize(rep.Runs, "B", levels)...)
		rep.Compare = Compare(rep.Summary, summary.DefaultAlpha)
		first := map[string]*Provenance{} // each side's first run's that has one
		for _, r := range rep.Runs {
			if first[r.Side] == nil {
				first[r.Side] = r.Provenance
			}
		}
		a, b := first["A"], first["B"]
		if d := FingerprintDiff(a, b); len(d) > 0 {
			for _, x := range d {
				rep.Notes = append(rep.Notes, "A and B differ in "+x)
			}
		} else if a != nil && b != nil {
			rep.Notes = append(rep.Notes, "A and B have the same server fingerprint (command, executable, python, environment)")
		}
	} else {
		rep.Summary = Summarize(rep.Runs, "", levels)
	}
}

// SummaryTable renders the per-level, per-metric statistics of one side.
func SummaryTable(sum []MetricSummary, side string) *table.Table {
	title := "Scored runs: mean, sample standard deviation, min and max of each run's mean"
	name := "runbook"
	if side != "" {
		title = "Side " + side + ": " + title[len("Scored runs: "):]
		name += "_" + strings.ToLower(side)
	}
	t := &table.Table{Name: name, Title: title, Columns: []string{"level", "metric", "mean", "sd", "min", "max", "n", "runs"}}
	for _, s := range sum {
		if s.Side != side {
			continue
		}
		var sd any = s.StdDev
		if s.N < 2 {
			sd = nil
		}
		t.AddRow(model.LevelLabel(s.Level), summary.Label(s.Metric), s.Mean, sd, s.Min, s.Max, s.N, strings.Join(s.Runs, " "))
	}
	return t
}

// VerdictTable lists the gaps of an incomplete verdict (or none).
func VerdictTable(v Verdict) *table.Table {
	t := &table.Table{Name: "verdict", Columns: []string{"run", "level", "repeat", "missing"}}
	if v.Complete {
		t.Title = "Verdict: complete"
		t.Columns = []string{"scored runs", "coverage"}
		t.AddRow(v.Scored, "evaluated == total, 0 skipped, 0 failed at every level and repeat")
		return t
	}
	t.Title = fmt.Sprintf("Verdict: INCOMPLETE: %d gaps in %d scored runs; no means are shown as full runs", len(v.Gaps), v.Scored)
	for _, g := range v.Gaps {
		t.AddRow(g.Run, cell(g.Level), cell(g.Repeat), g.What)
	}
	return t
}

// cell is v as a table cell: empty (nil) where v is its zero value.
func cell[T comparable](v T) any {
	if v == *new(T) {
		return nil
	}
	return v
}

// ptrCell is *p as a table cell: empty (nil) where p is nil.
func ptrCell[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// reportTables are what Run prints: the runs with their server pids, the
// summaries where the verdict is complete, and the verdict.
func reportTables(rep *Report) []*table.Table {
	rt := &table.Table{Name: "runs", Title: "Runs (each with a fresh server)", Columns: []string{"run", "scored", "pid", "startup (s)", "complete", "bundle"}, Notes: rep.Notes}
	for _, r := range rep.Runs {
		rt.AddRow(r.Dir, fmt.Sprint(r.Scored), r.PID, cell(r.StartupS), fmt.Sprint(r.Complete && r.Finished), r.Dir+"/")
	}
	tables := []*table.Table{rt}
	if rep.Verdict.Complete {
		if rep.Mode == "ab" {
			tables = append(tables, SummaryTable(rep.Summary, "A"), SummaryTable(rep.Summary, "B"), CompareTable(rep.Compare, summary.DefaultAlpha))
		} else {
			tables = append(tables, SummaryTable(rep.Summary, ""))
		}
	}
	vt := VerdictTable(rep.Verdict)
	if rep.Error != "" {
		vt.Notes = append(vt.Notes, "stopped: "+firstLine(rep.Error))
	}
	return append(tables, vt)
}
