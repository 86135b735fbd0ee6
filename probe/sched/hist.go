package sched

import "math"

// nbuckets is the number of run-queue histogram buckets (NBUCKETS in the BPF
// program).
const nbuckets = 32

// bucketBounds returns the range of bucket k in microseconds: bucket 0 holds
// waits under 1 µs, bucket k ≥ 1 holds [2^(k-1), 2^k) µs; the last bucket
// also holds everything longer.
func bucketBounds(k int) (lo, hi float64) {
	if k == 0 {
		return 0, 1
	}
	return math.Ldexp(1, k-1), math.Ldexp(1, k)
}

// quantile returns the q-quantile (0 ≤ q ≤ 1) of the waits counted in h, in
// microseconds. The rank q·N is located in its bucket and the value is
// interpolated linearly between the bucket's bounds, as if the waits were
// spread evenly inside it: exact at bucket edges, off by at most the
// bucket's width (a factor of two) inside one. It returns 0 for an empty
// histogram.
func quantile(h []uint64, q float64) float64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(n)
	var cum float64
	for k, c := range h {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo, hi := bucketBounds(k)
			return lo + (rank-cum)/float64(c)*(hi-lo)
		}
		cum += float64(c)
	}
	// Not reached unless rounding: the top of the last non-empty bucket.
	for k := len(h) - 1; k >= 0; k-- {
		if h[k] != 0 {
			_, hi := bucketBounds(k)
			return hi
		}
	}
	return 0
}
