package summary

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// DefaultAlpha is the significance level of a comparison.
const DefaultAlpha = 0.05

// Comparison is one metric of two sides, A (the baseline) and B: the one
// comparison of asrprof, an A/B runbook's (runbook.json's "compare"),
// asrprof compare's (the compare analysis) and what-if's.
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
	// AAFloor is the A/A noise floor of an experiment that measured A
	// more than once (ab's and what-if's orders, ABBAAB, ABA): AASpread of
	// the A runs; nil where A ran once. BeyondFloor: the ratio B/A lies
	// outside 1 ± AAFloor (JudgeFloor).
	AAFloor     *float64 `json:"aa_floor,omitempty"`
	BeyondFloor *bool    `json:"beyond_aa_floor,omitempty"`
}

// AASpread is the A/A noise floor of runs a of one side, interleaved with
// the other side's in one experiment: their range over their mean,
// (max − min) / mean, as a ratio. ok is false with fewer than two runs or
// a mean of 0. One rule for ab (JudgeFloor) and what-if
// (runbook.JudgeRatio).
func AASpread(a []float64) (float64, bool) {
	if len(a) < 2 {
		return 0, false
	}
	m := stats.Mean(a)
	if m == 0 {
		return 0, false
	}
	return (slices.Max(a) - slices.Min(a)) / math.Abs(m), true
}

// JudgeFloor sets c's A/A floor from its A runs and whether its ratio
// B/A lies beyond 1 ± the floor: a change within the spread of A's own
// runs is the experiment's noise, whatever its p.
func (c *Comparison) JudgeFloor() {
	s, ok := AASpread(c.A)
	if !ok {
		return
	}
	c.AAFloor = &s
	if c.Ratio != nil {
		c.BeyondFloor = new(math.Abs(*c.Ratio-1) > s)
	}
}

// FloorText is the A/A judgement for a table: "beyond ±4.0 %", "within
// ±4.0 %", or "unmeasured" where A ran once.
func (c Comparison) FloorText() string {
	switch {
	case c.AAFloor == nil:
		return "unmeasured"
	case c.BeyondFloor == nil:
		return fmt.Sprintf("±%.1f %%", 100**c.AAFloor)
	case *c.BeyondFloor:
		return fmt.Sprintf("beyond ±%.1f %%", 100**c.AAFloor)
	}
	return fmt.Sprintf("within ±%.1f %%", 100**c.AAFloor)
}

// Compare compares the values a and b (both non-empty): means, ratio B/A
// and stats.MannWhitney (exact without ties, normal approximation with
// them); significant when p < alpha. Level and Metric are the caller's.
func Compare(a, b []float64, alpha float64) Comparison {
	c := Comparison{MeanA: stats.Mean(a), MeanB: stats.Mean(b), A: a, B: b}
	if c.MeanA != 0 {
		c.Ratio = new(c.MeanB / c.MeanA)
	}
	c.U, c.P = stats.MannWhitney(a, b)
	c.Sig = c.P < alpha
	return c
}

// Delta is the comparison's change as asrprof prints it: "~" when it is
// not significant, else B's change over A in percent ("+12.3 %"), or
// "changed" where A's mean is 0.
func (c Comparison) Delta() string {
	switch {
	case !c.Sig:
		return "~"
	case c.Ratio == nil:
		return "changed"
	}
	return fmt.Sprintf("%+.1f %%", (*c.Ratio-1)*100)
}

// Metric is one number of a level that asrprof compares: its key (a
// pass's metric, PassValue), its label in tables, and its format.
type Metric struct {
	Key, Label, Format string
}

// Metrics are the metrics every comparison compares (ab, compare,
// what-if), in table order; with slo, goodput and SLO attainment (in %)
// follow.
func Metrics(slo bool) []Metric {
	m := []Metric{
		{"requests_per_s", "req/s", "%.2f"},
		{"throughput_samples_per_s", "samples/s", "%.2f"},
		{"rtfx", "RTFx", "%.2f"},
		{"latency_mean_s", "latency mean (s)", "%.3f"},
		{"latency_median_s", "latency p50 (s)", "%.3f"},
		{"latency_p95_s", "latency p95 (s)", "%.3f"},
		{"latency_p99_s", "latency p99 (s)", "%.3f"},
		{"rtf_mean", "RTF mean", "%.3f"},
		{"corpus_wer", "corpus WER", "%.4f"},
	}
	if slo {
		m = append(m, Metric{"goodput_req_s", "goodput (req/s)", "%.2f"}, Metric{"slo_attainment_pct", "SLO attainment (%)", "%.1f"})
	}
	return m
}

// Label is the label of the metric key ("" for none of Metrics).
func Label(key string) string {
	i := slices.IndexFunc(Metrics(true), func(m Metric) bool { return m.Key == key })
	if i < 0 {
		return ""
	}
	return Metrics(true)[i].Label
}

// PassValue is one pass's value of the metric key: the field of
// model.PassMetrics whose json tag is key (slo_attainment_pct: the
// attainment in percent); false where the pass has none.
func PassValue(p model.PassMetrics, key string) (float64, bool) {
	scale := 1.0
	if key == "slo_attainment_pct" {
		key, scale = "slo_attainment", 100
	}
	v := reflect.ValueOf(p)
	for _, f := range reflect.VisibleFields(v.Type()) {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != key {
			continue
		}
		x := v.FieldByIndex(f.Index)
		if x.Kind() == reflect.Pointer {
			if x.IsNil() {
				return 0, false
			}
			x = x.Elem()
		}
		if !x.CanFloat() {
			return 0, false
		}
		return scale * x.Float(), true
	}
	return 0, false
}

// LevelValues are a level's values of the metric key, one a repeat
// (PassValue), where its passes have one.
func LevelValues(r model.LevelResult, key string) []float64 {
	var xs []float64
	for _, p := range r.PerRepeat {
		if x, ok := PassValue(p, key); ok {
			xs = append(xs, x)
		}
	}
	return xs
}

// MinP is the smallest p the comparison's test can give for n1 and n2
// values, that of fully separated samples (2 / C(n1+n2, n1) where the test
// is exact): with 3 a side 0.1, so nothing is significant at 0.05. It is 1
// when a side is empty.
func MinP(n1, n2 int) float64 {
	if n1 == 0 || n2 == 0 {
		return 1
	}
	xs := make([]float64, n1+n2)
	for i := range xs {
		xs[i] = float64(i)
	}
	_, p := stats.MannWhitney(xs[:n1], xs[n1:])
	return p
}

// PowerNote is the note of comparisons whose sides are too small for any
// difference to show as significant at alpha, whatever the values: the
// sizes (what counts them: "runs", "repeats") and the smallest p they
// allow. "" where some comparison could be significant.
func PowerNote(cs []Comparison, alpha float64, what string) string {
	worst := 0.0
	var sizes []string
	for _, c := range cs {
		worst = math.Max(worst, MinP(len(c.A), len(c.B)))
		if s := fmt.Sprintf("%d and %d", max(len(c.A), len(c.B)), min(len(c.A), len(c.B))); !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	if len(cs) == 0 || worst < alpha {
		return ""
	}
	return fmt.Sprintf("with %s %s a side, the smallest p a Mann-Whitney U test can give is %.3g ≥ alpha %g: no difference can show as significant (every delta reads ~); add %s (4 a side give 0.029)",
		strings.Join(sizes, " or "), what, worst, alpha, what)
}
