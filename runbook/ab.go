package runbook

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/table"
)

// Compare pairs each A summary with the B one of its level and metric
// (summary.Compare over the runs' values), in the order of the A ones,
// each judged against the experiment's A/A floor where A ran more than
// once (Comparison.JudgeFloor: the A runs' spread, the rule what-if's
// JudgeRatio uses).
func Compare(sum []MetricSummary, alpha float64) []summary.Comparison {
	b := map[[2]string]MetricSummary{}
	for _, s := range sum {
		if s.Side == "B" {
			b[[2]string{s.Level, s.Metric}] = s
		}
	}
	var out []summary.Comparison
	for _, a := range sum {
		if sb, ok := b[[2]string{a.Level, a.Metric}]; ok && a.Side == "A" {
			c := summary.Compare(a.Values, sb.Values, alpha)
			c.Level, c.Metric = a.Level, a.Metric
			c.JudgeFloor()
			out = append(out, c)
		}
	}
	return out
}

// CompareTable renders the comparison: means, ratio, p, the change
// (summary.Comparison.Delta: in percent, or ~ when not significant at
// alpha) and the ratio against the A/A floor, with summary.PowerNote.
func CompareTable(cs []summary.Comparison, alpha float64) *table.Table {
	t := &table.Table{
		Name:    "ab",
		Title:   fmt.Sprintf("A vs B over the scored runs: mean of each side, ratio B/A, Mann-Whitney U p (~: not significant at %g)", alpha),
		Columns: []string{"level", "metric", "A", "B", "B/A", "p", "delta", "vs A/A floor"},
	}
	measured := false
	var unresolved []string
	for _, c := range cs {
		t.AddRow(model.LevelLabel(c.Level), summary.Label(c.Metric), c.MeanA, c.MeanB, ptrCell(c.Ratio), c.P, c.Delta(), c.FloorText())
		measured = measured || c.AAFloor != nil
		if c.Sig && c.BeyondFloor != nil && !*c.BeyondFloor {
			unresolved = append(unresolved, fmt.Sprintf("%s %s %s (p %.3g)", model.LevelLabel(c.Level), summary.Label(c.Metric), c.Delta(), c.P))
		}
	}
	if measured {
		t.Notes = append(t.Notes, "vs A/A floor: the ratio B/A against the spread of this experiment's own A runs ((max − min) / mean, interleaved with B on the same host): within it, the change is no larger than A differs from itself")
	} else if len(cs) > 0 {
		t.Notes = append(t.Notes, "vs A/A floor: unmeasured, A ran once (an order such as ABBA or ABA measures it)")
	}
	if len(unresolved) > 0 {
		t.Notes = append(t.Notes, "sample size: "+strings.Join(unresolved, "; ")+": called significant, but within the A/A floor: A differs from itself as much, so the change is not resolved (more runs of each side narrow the floor)")
	}
	if n := summary.PowerNote(cs, alpha, "runs"); n != "" {
		t.Notes = append(t.Notes, n)
	}
	return t
}

// FingerprintDiff lists how the servers of two runs differ in what their
// results depend on: command, executable (path, sha256), Python, and the
// recorded environment. It is empty when they match.
func FingerprintDiff(a, b *Provenance) []string {
	if a == nil || b == nil {
		return nil
	}
	var out []string
	diff := func(what, x, y string) {
		if x != y {
			out = append(out, fmt.Sprintf("%s: A %s, B %s", what, orNone(x), orNone(y)))
		}
	}
	diff("command", a.Command, b.Command)
	ea, eb := *cmp.Or(a.Executable, new(Executable)), *cmp.Or(b.Executable, new(Executable)) // nil: the zero value
	diff("executable", ea.Path, eb.Path)
	if ea.Path == eb.Path || ea.SHA256 != eb.SHA256 {
		diff("executable sha256", short(ea.SHA256), short(eb.SHA256))
	}
	pa, pb := *cmp.Or(a.Python, new(PythonInfo)), *cmp.Or(b.Python, new(PythonInfo))
	diff("python", strings.TrimSpace(pa.Version+" "+pa.Prefix), strings.TrimSpace(pb.Version+" "+pb.Prefix))
	keys := map[string]string{}
	maps.Copy(keys, a.Env)
	maps.Copy(keys, b.Env)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		va, oka := a.Env[k]
		vb, okb := b.Env[k]
		if va != vb || oka != okb {
			diff("env "+k, quoteIf(va, oka), quoteIf(vb, okb))
		}
	}
	return out
}

func orNone(s string) string { return cmp.Or(s, "(none)") }

func short(sha string) string { return sha[:min(len(sha), 12)] }

func quoteIf(v string, ok bool) string {
	if !ok {
		return "(unset)"
	}
	return fmt.Sprintf("%q", v)
}
