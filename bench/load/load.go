// Package load schedules requests: a closed loop keeps exactly N requests in
// flight; an open loop sends on a schedule (constant or Poisson arrivals,
// or a recorded trace: trace.go) whatever the server does, and measures latency from the intended send
// time so that queueing in the server cannot hide behind a slow client
// (no coordinated omission).
//
// The package knows nothing about HTTP or audio: it calls a Task for each
// index of the pass.
package load

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Task sends request number i of a pass. intended is when the schedule
// wanted it sent (for a closed loop: when a worker became free). Task must
// return when ctx is done.
type Task func(ctx context.Context, i int, intended time.Time)

// SlotTask is a Task that also learns its slot: which of the closed loop's
// concurrency workers (0..concurrency-1) runs it. The tasks of one slot run
// one after another on one goroutine.
type SlotTask func(ctx context.Context, i, slot int, intended time.Time)

// ClosedSlots runs tasks 0..n-1 with exactly concurrency of them in flight
// (fewer at the tail), each told its slot, so that a caller can time what
// happens on a slot between one task and the next. It stops handing out
// new indices once stop is done, and returns when every started task has
// returned. It returns how many tasks were started. With n = math.MaxInt
// only stop ends it (a pass of a duration: stop's deadline).
func ClosedSlots(stop, ctx context.Context, n, concurrency int, task SlotTask) int {
	var (
		mu   sync.Mutex
		next int // the next index, and so how many were started
		wg   sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= n || stop.Err() != nil {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for w := 0; w < max(concurrency, 1) && w < n; w++ {
		wg.Go(func() {
			for {
				i, ok := take()
				if !ok {
					return
				}
				task(ctx, i, w, time.Now())
			}
		})
	}
	wg.Wait()
	return next
}

// Arrivals names an open-loop schedule.
type Arrivals string

// Open-loop schedules.
const (
	Constant Arrivals = "constant"
	Poisson  Arrivals = "poisson"
)

// Next gives the send offset of request i from the start of the pass, or
// false when the pass has no request i. OpenFunc calls it with i = 0, 1,
// 2… in order, once each, and stops at the first false; offsets must not
// decrease.
type Next func(i int) (time.Duration, bool)

// OpenFunc sends task i at start+next(i), each in its own goroutine,
// however many are still in flight; next produces the schedule one request
// at a time, so that a pass of any length holds no schedule in memory. It
// stops scheduling once stop is done and returns when every started task
// has returned, with how many were started.
func OpenFunc(stop, ctx context.Context, next Next, task Task) int {
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	started := 0
	for i := 0; ; i++ {
		off, ok := next(i)
		if !ok {
			break
		}
		at := start.Add(off)
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-stop.Done():
				wg.Wait()
				return started
			}
		} else if stop.Err() != nil {
			break
		}
		started++
		wg.Go(func() { task(ctx, i, at) })
	}
	wg.Wait()
	return started
}

// Stream returns the send offsets from the start of the pass for rate
// requests per second, one at a time, without end; Poisson offsets are
// deterministic for a seed. Its Next must be called in order (OpenFunc
// does).
func Stream(rate float64, arrivals Arrivals, seed uint64) Next {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var t float64
	return func(i int) (time.Duration, bool) {
		switch {
		case rate <= 0:
			return 0, true
		case arrivals != Poisson:
			// i/rate, not a running sum: no drift over a long pass, and
			// exactly rate×D sends before D (300/s for 120 s: 36,000).
			return time.Duration(math.Round(float64(i) / rate * float64(time.Second))), true
		}
		off := time.Duration(math.Round(t * float64(time.Second)))
		t += rng.ExpFloat64() / rate
		return off, true
	}
}
