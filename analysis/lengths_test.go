package analysis

import (
	"math"
	"testing"
)

// The auto edges are the terciles rounded to two significant digits and
// printed as such: the demo's twelve clips (2.99–8.35 s) cut at 7.1 s.
func TestLengthSplitAuto(t *testing.T) {
	demo := []float64{7.1, 7.888875, 6.454562, 8.352937, 5.916688, 7.1, 7.1, 7.1, 7.1, 7.1, 7.1, 2.99}
	sp := LengthBuckets{}.Split(demo, nil)
	if len(sp.Edges) != 1 || sp.Edges[0] != 7.1 || !sp.Auto {
		t.Fatalf("edges %v (auto %v), want [7.1]", sp.Edges, sp.Auto)
	}
	if len(sp.Buckets) != 2 || sp.Buckets[0].Name != "≤ 7.1 s" || sp.Buckets[1].Name != "> 7.1 s" || sp.Buckets[0].Requests != 10 || sp.Buckets[1].Requests != 2 {
		t.Errorf("buckets %+v", sp.Buckets)
	}
	for _, c := range []struct{ x, want float64 }{{2.347, 2.3}, {47.2, 47}, {123, 120}, {0.0456, 0.046}, {7.1000000001, 7.1}} {
		if got := round2(c.x); got != c.want || math.Abs(got-c.want) > 0 {
			t.Errorf("round2(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}
