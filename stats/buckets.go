package stats

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// Bucket is one bucket of a Prometheus histogram: its upper bound (the
// label le; +Inf for the last) and the cumulative count of observations
// at most that bound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// BucketQuantile is the q-quantile (0 ≤ q ≤ 1) of a Prometheus histogram's
// buckets, computed as PromQL's histogram_quantile does for classic
// histograms (prometheus/prometheus promql/quantile.go, bucketQuantile):
// the buckets are sorted by bound, buckets of equal bound merged, counts
// that differ by a relative 1e-12 made equal and decreasing counts raised
// to the previous (a monotone envelope); then the bucket that holds rank
// q·n (n: the +Inf bucket's count) is found, and the quantile is
// interpolated linearly within it, from the previous bucket's bound (0
// below the first bucket) to its own. Where the rank falls in the +Inf
// bucket, the highest finite bound is returned; where it falls in a first
// bucket whose bound is at most 0, that bound.
//
// NaN when there are fewer than two buckets, when the highest bound is not
// +Inf, when there are no observations, or when q is NaN; -Inf for q < 0
// and +Inf for q > 1. bs is not modified.
func BucketQuantile(q float64, bs []Bucket) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(1)
	case len(bs) == 0:
		return math.NaN()
	}
	b := slices.Clone(bs)
	slices.SortStableFunc(b, func(x, y Bucket) int { return cmp.Compare(x.UpperBound, y.UpperBound) })
	if !math.IsInf(b[len(b)-1].UpperBound, 1) {
		return math.NaN()
	}
	// Merge buckets of the same bound.
	out := b[:1]
	for _, x := range b[1:] {
		if last := &out[len(out)-1]; x.UpperBound == last.UpperBound {
			last.Count += x.Count
		} else {
			out = append(out, x)
		}
	}
	b = out
	// Float noise: a count within a relative 1e-12 of the previous one is
	// that count.
	prev := b[0].Count
	for i := 1; i < len(b); i++ {
		cur := b[i].Count
		if d := math.Abs(cur - prev); d == 0 {
			continue
		} else if d/cur <= 1e-12 {
			b[i].Count = prev
		} else {
			prev = cur
		}
	}
	// The monotone envelope.
	for i := 1; i < len(b); i++ {
		b[i].Count = max(b[i].Count, b[i-1].Count)
	}
	if len(b) < 2 {
		return math.NaN()
	}
	n := b[len(b)-1].Count
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	i := sort.Search(len(b)-1, func(i int) bool { return b[i].Count >= rank })
	if i == len(b)-1 {
		return b[len(b)-2].UpperBound
	}
	if i == 0 && b[0].UpperBound <= 0 {
		return b[0].UpperBound
	}
	lo, hi, count := 0.0, b[i].UpperBound, b[i].Count
	if i > 0 {
		lo = b[i-1].UpperBound
		count -= b[i-1].Count
		rank -= b[i-1].Count
	}
	return lo + (hi-lo)*(rank/count)
}
