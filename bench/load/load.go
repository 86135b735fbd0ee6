// Package load schedules requests: a closed loop keeps exactly N requests in
// flight; an open loop sends on a schedule (constant or Poisson arrivals)
// whatever the server does, and measures latency from the intended send
// time so that queueing in the server cannot hide behind a slow client
// (no coordinated omission).
//
// The package knows nothing about HTTP or audio: it calls a Task for each
// index of the pass.
package load

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Task sends request number i of a pass. intended is when the schedule
// wanted it sent (for a closed loop: when a worker became free). Task must
// return when ctx is done.
type Task func(ctx context.Context, i int, intended time.Time)

// Closed runs tasks 0..n-1 with exactly concurrency of them in flight
// (fewer at the tail). It stops handing out new indices once stop is done,
// and returns when every started task has returned. It returns how many
// tasks were started.
func Closed(stop, ctx context.Context, n, concurrency int, task Task) int {
	if concurrency < 1 {
		concurrency = 1
	}
	var (
		mu      sync.Mutex
		next    int
		wg      sync.WaitGroup
		started int
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= n || stop.Err() != nil {
			return 0, false
		}
		i := next
		next++
		started++
		return i, true
	}
	for w := 0; w < concurrency && w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := take()
				if !ok {
					return
				}
				task(ctx, i, time.Now())
			}
		}()
	}
	wg.Wait()
	return started
}

// Arrivals names an open-loop schedule.
type Arrivals string

// Open-loop schedules.
const (
	Constant Arrivals = "constant"
	Poisson  Arrivals = "poisson"
)

// Schedule returns the n send offsets from the start of the pass for rate
// requests per second. Poisson offsets are deterministic for a seed.
func Schedule(n int, rate float64, arrivals Arrivals, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if rate <= 0 {
		return out
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var t float64
	for i := range out {
		out[i] = time.Duration(t * float64(time.Second))
		if arrivals == Poisson {
			t += rng.ExpFloat64() / rate
		} else {
			t += 1 / rate
		}
	}
	return out
}

// Open sends task i at start+offsets[i], each in its own goroutine, however
// many are still in flight. It stops scheduling once stop is done and
// returns when every started task has returned, with how many were started.
func Open(stop, ctx context.Context, offsets []time.Duration, task Task) int {
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	started := 0
	for i, off := range offsets {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			task(ctx, i, at)
		}()
	}
	wg.Wait()
	return started
}
