package summary

import (
	"fmt"
	"testing"

	"github.com/asrprof/asrprof/model"
)

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []float64
		want string // mean A, mean B, ratio, U, p, significant
	}{
		{"separated 4+4", []float64{1, 1.2, 1.1, 1.05}, []float64{2, 2.2, 2.1, 2.05}, "1.0875 2.0875 1.920 0 0.0286 true"},
		{"separated 3+3: never significant", []float64{1, 2, 3}, []float64{4, 5, 6}, "2.0000 5.0000 2.500 0 0.1000 false"},
		{"same", []float64{1, 2, 3}, []float64{1, 2, 3}, "2.0000 2.0000 1.000 4.5 1.0000 false"},
		{"mean A 0: no ratio; ties: the normal approximation", []float64{0, 0}, []float64{1, 2}, "0.0000 1.5000 - 0 0.2207 false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(tc.a, tc.b, DefaultAlpha)
			ratio := "-"
			if c.Ratio != nil {
				ratio = fmt.Sprintf("%.3f", *c.Ratio)
			}
			if got := fmt.Sprintf("%.4f %.4f %s %g %.4f %v", c.MeanA, c.MeanB, ratio, c.U, c.P, c.Sig); got != tc.want {
				t.Errorf("Compare = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMinP(t *testing.T) {
	for _, tc := range []struct {
		n1, n2 int
		want   string
	}{
		{3, 3, "0.1"}, {4, 4, "0.02857"}, {3, 2, "0.2"}, {0, 3, "1"}, {1, 1, "1"},
		// Past 40 values the test is the normal approximation, and so is
		// its smallest p (not 2 / C(42, 21) = 3.7e-12).
		{21, 21, "3.125e-08"},
	} {
		if got := fmt.Sprintf("%.4g", MinP(tc.n1, tc.n2)); got != tc.want {
			t.Errorf("MinP(%d, %d) = %s, want %s", tc.n1, tc.n2, got, tc.want)
		}
	}
}

// The one rule of ~ / +x % / changed.
func TestDelta(t *testing.T) {
	for _, tc := range []struct {
		a, b []float64
		want string
	}{
		{[]float64{1, 1.2, 1.1, 1.05}, []float64{2, 2.2, 2.1, 2.05}, "+92.0 %"},
		{[]float64{2, 2.2, 2.1, 2.05}, []float64{1, 1.2, 1.1, 1.05}, "-47.9 %"},
		{[]float64{1, 2, 3}, []float64{4, 5, 6}, "~"},
		{[]float64{0, 0, 0, 0}, []float64{1, 2, 3, 4}, "changed"},
	} {
		if got := Compare(tc.a, tc.b, DefaultAlpha).Delta(); got != tc.want {
			t.Errorf("%v vs %v: delta %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// Every compared metric is a pass's metric: a key that names no field of
// model.PassMetrics would compare nothing.
func TestMetricsArePassValues(t *testing.T) {
	p := model.PassMetrics{RequestsPerS: 1, SLOAttainment: new(0.25), GoodputReqS: new(2.0)}
	for _, m := range Metrics(true) {
		if _, ok := PassValue(p, m.Key); !ok {
			t.Errorf("%s (%s): no such pass metric", m.Key, m.Label)
		}
		if Label(m.Key) != m.Label || m.Format == "" {
			t.Errorf("%s: label %q, format %q", m.Key, Label(m.Key), m.Format)
		}
	}
	if x, _ := PassValue(p, "slo_attainment_pct"); x != 25 {
		t.Errorf("slo_attainment_pct %v, want 25", x)
	}
	if x, ok := PassValue(model.PassMetrics{}, "goodput_req_s"); ok {
		t.Errorf("a pass without goodput has one: %v", x)
	}
}

func TestPowerNote(t *testing.T) {
	three := Comparison{A: make([]float64, 3), B: make([]float64, 3)}
	four := Comparison{A: make([]float64, 4), B: make([]float64, 4)}
	if n := PowerNote([]Comparison{three}, DefaultAlpha, "runs"); n != "with 3 and 3 runs a side, the smallest p a Mann-Whitney U test can give is 0.1 ≥ alpha 0.05: no difference can show as significant (every delta reads ~); add runs (4 a side give 0.029)" {
		t.Errorf("3+3: %q", n)
	}
	if n := PowerNote([]Comparison{four}, DefaultAlpha, "runs"); n != "" {
		t.Errorf("4+4 can be significant, yet: %q", n)
	}
	if n := PowerNote(nil, DefaultAlpha, "runs"); n != "" {
		t.Errorf("no comparisons: %q", n)
	}
}
