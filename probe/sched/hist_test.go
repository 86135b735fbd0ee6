package sched

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	h := func(pairs ...int) []uint64 {
		out := make([]uint64, nbuckets)
		for i := 0; i < len(pairs); i += 2 {
			out[pairs[i]] = uint64(pairs[i+1])
		}
		return out
	}
	tests := []struct {
		name string
		h    []uint64
		q    float64
		want float64
	}{
		{"empty", h(), 0.5, 0},
		// 100 waits in [4,8) µs: the median is the bucket's middle.
		{"one bucket p50", h(3, 100), 0.5, 6},
		{"one bucket p0", h(3, 100), 0, 4},
		{"one bucket p100", h(3, 100), 1, 8},
		// 50 waits under 1 µs and 50 in [1024, 2048): p50 is the first
		// bucket's top, p99 is 98 % into the upper bucket.
		{"two buckets p50", h(0, 50, 11, 50), 0.5, 1},
		{"two buckets p99", h(0, 50, 11, 50), 0.99, 1024 + 0.98*1024},
		{"q clamped", h(1, 10), 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(tt.h, tt.q); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("quantile(%v) = %g, want %g", tt.q, got, tt.want)
			}
		})
	}
}

func TestBucketBounds(t *testing.T) {
	// Bucket k must hold what the BPF program's log2_bucket puts there:
	// us == 0 → 0, else floor(log2(us)) + 1.
	for _, us := range []uint64{0, 1, 2, 3, 4, 7, 8, 1000, 1 << 20} {
		k := 0
		if us > 0 {
			k = 64 - leadingZeros(us)
		}
		lo, hi := bucketBounds(k)
		if float64(us) < lo || float64(us) >= hi {
			t.Errorf("us=%d: bucket %d is [%g,%g)", us, k, lo, hi)
		}
	}
}

func leadingZeros(x uint64) int {
	n := 0
	for i := 63; i >= 0 && x&(1<<i) == 0; i-- {
		n++
	}
	return n
}
