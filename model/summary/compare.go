package summary

import "github.com/asrprof/asrprof/stats"

// DefaultAlpha is the significance level of a comparison.
const DefaultAlpha = 0.05

// Comparison is one metric of two sides, A (the baseline) and B: the one
// comparison of asrprof, an A/B runbook's (runbook.json's "compare") and
// asrprof compare's (the compare analysis, through stats.compare).
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
