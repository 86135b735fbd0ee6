package load

import (
	"context"
	"time"
)

// The tests' conveniences over the package's loops: the whole pass's
// schedule at once, an open loop on it, and a closed loop without slots.

// Schedule returns the n send offsets from the start of the pass for rate
// requests per second. Poisson offsets are deterministic for a seed.
func Schedule(n int, rate float64, arrivals Arrivals, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if rate <= 0 {
		return out
	}
	next := Stream(rate, arrivals, seed)
	for i := range out {
		out[i], _ = next(i)
	}
	return out
}

// Open sends task i at start+offsets[i] (OpenFunc).
func Open(stop, ctx context.Context, offsets []time.Duration, task Task) int {
	return OpenFunc(stop, ctx, func(i int) (time.Duration, bool) {
		if i >= len(offsets) {
			return 0, false
		}
		return offsets[i], true
	}, task)
}

// Closed is ClosedSlots without the slot.
func Closed(stop, ctx context.Context, n, concurrency int, task Task) int {
	return ClosedSlots(stop, ctx, n, concurrency, func(ctx context.Context, i, _ int, intended time.Time) {
		task(ctx, i, intended)
	})
}
