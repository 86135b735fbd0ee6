package stats

import (
	"math"
	"testing"
)

// BucketQuantile against hand-computed values of PromQL's
// histogram_quantile.
func TestBucketQuantile(t *testing.T) {
	inf := math.Inf(1)
	bk := func(pairs ...float64) []Bucket {
		var out []Bucket
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, Bucket{pairs[i], pairs[i+1]})
		}
		return out
	}
	mid := bk(0.1, 2, 0.2, 6, 0.5, 10, inf, 10)
	for _, tc := range []struct {
		name string
		q    float64
		bs   []Bucket
		want float64
	}{
		// rank 5 falls in (0.1, 0.2], which holds 4 (counts 2 → 6):
		// 0.1 + 0.1 × (5−2)/4.
		{"middle bucket p50", 0.5, mid, 0.175},
		// rank 9.5 falls in (0.2, 0.5], 4 observations: 0.2 + 0.3 × 3.5/4.
		{"middle bucket p95", 0.95, mid, 0.4625},
		// rank 5 of 10 in the first bucket (8 observations, from 0):
		// 0.1 × 5/8.
		{"first bucket", 0.5, bk(0.1, 8, 1, 10, inf, 10), 0.0625},
		// rank 5 beyond every finite bucket: the highest finite bound.
		{"+Inf bucket", 0.5, bk(0.1, 1, 1, 2, inf, 10), 1},
		// A first bucket bounded at 0 (SGLang's queue time): its bound.
		{"first bound 0", 0.5, bk(0, 6, 0.1, 8, inf, 10), 0},
		// Unsorted, a duplicated bound (merged: 0.2 holds 3+3) and a
		// count that decreases (0.5: 5, raised to 6): rank 3 of 10 in
		// (0.1, 0.2], 0.1 + 0.1 × (3−2)/4.
		{"unsorted, merged, monotone", 0.3, bk(inf, 10, 0.5, 5, 0.2, 3, 0.1, 2, 0.2, 3), 0.125},
		{"no observations", 0.5, bk(0.1, 0, 1, 0, inf, 0), math.NaN()},
		{"no +Inf bucket", 0.5, bk(0.1, 1, 1, 2), math.NaN()},
		{"one bucket", 0.5, bk(inf, 3), math.NaN()},
		{"no buckets", 0.5, nil, math.NaN()},
		{"q < 0", -0.1, mid, math.Inf(-1)},
		{"q > 1", 1.1, mid, inf},
	} {
		got := BucketQuantile(tc.q, tc.bs)
		if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want) || math.Abs(got-tc.want) < 1e-12) {
			t.Errorf("%s: BucketQuantile(%v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
	// The input is left as it was.
	in := bk(inf, 10, 0.1, 2)
	BucketQuantile(0.5, in)
	if in[0].UpperBound != inf || in[1].Count != 2 {
		t.Errorf("input modified: %v", in)
	}
}
