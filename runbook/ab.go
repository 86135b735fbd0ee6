package runbook

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/stats"
	"github.com/asrprof/asrprof/table"
)

// DefaultAlpha is the significance level of the A/B comparison.
const DefaultAlpha = 0.05

// Comparison is one level and metric of an A/B session.
type Comparison struct {
	Level  string    `json:"level"`
	Metric string    `json:"metric"`
	MeanA  float64   `json:"mean_a"`
	MeanB  float64   `json:"mean_b"`
	Ratio  *float64  `json:"ratio_b_over_a"` // nil when mean A is 0
	U      float64   `json:"u"`
	P      float64   `json:"p"`
	Sig    bool      `json:"significant"`
	A      []float64 `json:"a"`
	B      []float64 `json:"b"`
}

// Compare pairs the A and B summaries of each level and metric: means,
// ratio B/A and the two-sided Mann-Whitney U test over the runs' values
// (stats.MannWhitney: exact without ties, normal approximation with
// them).
func Compare(sum []MetricSummary, levels []capture.SweepPoint, alpha float64) []Comparison {
	type key struct{ level, metric string }
	side := map[string]map[key]MetricSummary{"A": {}, "B": {}}
	for _, s := range sum {
		if m, ok := side[s.Side]; ok {
			m[key{s.Level, s.Metric}] = s
		}
	}
	var out []Comparison
	for _, lv := range levels {
		for _, m := range Metrics() {
			k := key{lv.Name, m.Key}
			a, okA := side["A"][k]
			b, okB := side["B"][k]
			if !okA || !okB {
				continue
			}
			c := Comparison{Level: lv.Name, Metric: m.Key, MeanA: a.Mean, MeanB: b.Mean, A: a.Values, B: b.Values}
			if a.Mean != 0 {
				r := b.Mean / a.Mean
				c.Ratio = &r
			}
			c.U, c.P = stats.MannWhitney(a.Values, b.Values)
			c.Sig = c.P < alpha
			out = append(out, c)
		}
	}
	return out
}

// MinP is the smallest two-sided p-value an exact Mann-Whitney U test can
// give for samples of n1 and n2 values: 2 / C(n1+n2, n1). With 3 runs a
// side it is 0.1, so no difference can be significant at 0.05.
func MinP(n1, n2 int) float64 {
	if n1 == 0 || n2 == 0 {
		return 1
	}
	c := 1.0
	for i := 1; i <= n1; i++ {
		c = c * float64(n2+i) / float64(i)
	}
	return math.Min(1, 2/c)
}

// CompareTable renders the comparison: means, ratio, p, and the change in
// percent or ~ when it is not significant at alpha.
func CompareTable(cs []Comparison, alpha float64) *table.Table {
	t := &table.Table{
		Name:    "ab",
		Title:   fmt.Sprintf("A vs B over the scored runs: mean of each side, ratio B/A, Mann-Whitney U p (~: not significant at %g)", alpha),
		Columns: []string{"level", "metric", "A", "B", "B/A", "p", "delta"},
	}
	labels := map[string]string{}
	for _, m := range Metrics() {
		labels[m.Key] = m.Label
	}
	worst := 0.0
	for _, c := range cs {
		var ratio any
		delta := "~"
		if c.Ratio != nil {
			ratio = *c.Ratio
			if c.Sig {
				delta = fmt.Sprintf("%+.1f%%", (*c.Ratio-1)*100)
			}
		} else if c.Sig {
			delta = "changed"
		}
		t.AddRow(c.Level, labels[c.Metric], c.MeanA, c.MeanB, ratio, c.P, delta)
		worst = math.Max(worst, MinP(len(c.A), len(c.B)))
	}
	if len(cs) > 0 && worst >= alpha {
		t.Notes = append(t.Notes, fmt.Sprintf("with %s, the smallest p a Mann-Whitney U test can give is %.3g ≥ %g: no difference can show as significant; add runs to the order (4 a side give 0.029)",
			sizes(cs), worst, alpha))
	}
	return t
}

func sizes(cs []Comparison) string {
	seen := map[string]bool{}
	var out []string
	for _, c := range cs {
		s := fmt.Sprintf("%d A and %d B runs", len(c.A), len(c.B))
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return strings.Join(out, " or ")
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
	var ea, eb Executable
	if a.Executable != nil {
		ea = *a.Executable
	}
	if b.Executable != nil {
		eb = *b.Executable
	}
	diff("executable", ea.Path, eb.Path)
	if ea.Path == eb.Path || ea.SHA256 != eb.SHA256 {
		diff("executable sha256", short(ea.SHA256), short(eb.SHA256))
	}
	var pa, pb PythonInfo
	if a.Python != nil {
		pa = *a.Python
	}
	if b.Python != nil {
		pb = *b.Python
	}
	diff("python", strings.TrimSpace(pa.Version+" "+pa.Prefix), strings.TrimSpace(pb.Version+" "+pb.Prefix))
	keys := map[string]bool{}
	for k := range a.Env {
		keys[k] = true
	}
	for k := range b.Env {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		va, oka := a.Env[k]
		vb, okb := b.Env[k]
		if va != vb || oka != okb {
			diff("env "+k, quoteIf(va, oka), quoteIf(vb, okb))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func quoteIf(v string, ok bool) string {
	if !ok {
		return "(unset)"
	}
	return fmt.Sprintf("%q", v)
}
