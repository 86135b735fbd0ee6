package summary

import (
	"fmt"
	"testing"
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
