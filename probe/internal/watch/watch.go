// Package watch holds what the probes that follow a target's process tree
// share: the tree's processes as of now (Pids), the goroutine that keeps
// what a probe watches up to date while it runs and ends with it (Loop,
// Loop.Close), reading threads' counters in order (ThreadOrder, Sub) and
// writing their records (Append).
package watch

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
)

// Pids returns the target's processes: t.PID and its descendants as /proc
// showed them at most TreeMaxAge ago, then what t.Children returns when it
// is set. A pid may appear twice. It returns nil (plus Children) when
// t.PID is gone.
func Pids(t probe.Target) []int {
	var pids []int
	if proctree.Alive(t.PID) {
		pids = proctree.DescendantsOf(t.PID, parents())
	}
	if t.Children != nil {
		pids = append(pids, t.Children()...)
	}
	return pids
}

// TreeMaxAge is how long one walk of /proc serves every probe's refresh.
// The walk opens every process's stat file, which was the probes' main
// steady cost when each probe walked on its own every 500 ms. A process
// forked since the walk is found by the next one: the sched probe's BPF
// program watches a watched process's children at once anyway, the cpu
// and cuda probes see them within a refresh plus TreeMaxAge.
const TreeMaxAge = 400 * time.Millisecond

var tree struct {
	sync.Mutex
	at     time.Time
	parent map[int]int
}

// parents returns the process tree's parent map, walking /proc when the
// last walk is older than TreeMaxAge. The map is shared: read only.
func parents() map[int]int {
	tree.Lock()
	defer tree.Unlock()
	if tree.parent == nil || time.Since(tree.at) > TreeMaxAge {
		tree.parent, tree.at = proctree.Parents(), time.Now()
	}
	return tree.parent
}

// Loop calls a probe's refresh function at a fixed interval on a goroutine
// of its own, holding the probe's lock, and keeps the first error it
// returns until the probe takes it (in End). A probe is started while its
// Loop runs. Create it with NewLoop.
//
// Start, Running, Keep and TakeErr must be called with the probe's lock
// held; Close without it.
type Loop struct {
	mu      sync.Locker
	every   time.Duration
	refresh func() error

	// Guarded by mu.
	err    error
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine returns; nil when not running
}

// NewLoop returns a stopped loop that, once started, calls refresh every
// interval with mu held.
func NewLoop(mu sync.Locker, every time.Duration, refresh func() error) *Loop {
	return &Loop{mu: mu, every: every, refresh: refresh}
}

// Start starts the goroutine. It does nothing when the loop runs already.
func (l *Loop) Start() {
	if l.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		Every(ctx, l.every, l.mu, func() { l.Keep(l.refresh()) })
	}(l.done)
}

// Every calls fn holding mu every period until ctx is done: the probes'
// periodic loops (the refresh, the cpu probe's perf drain, the proc
// probe's bins).
func Every(ctx context.Context, every time.Duration, mu sync.Locker, fn func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			mu.Lock()
			fn()
			mu.Unlock()
		}
	}
}

// Running reports whether the loop was started and not stopped since.
func (l *Loop) Running() bool { return l.done != nil }

// Keep records err for TakeErr unless err is nil or an error is kept
// already. Probes use it for errors of work done outside End (Begin).
func (l *Loop) Keep(err error) {
	if err != nil && l.err == nil {
		l.err = err
	}
}

// TakeErr returns the first error kept since the last TakeErr, and
// forgets it.
func (l *Loop) TakeErr() error {
	err := l.err
	l.err = nil
	return err
}

// Close is a probe's Stop: it stops the loop, waits for its goroutine to
// return (it may be finishing a refresh, which needs the lock) and, when
// the loop was running, calls release (nil: nothing to release) with the
// probe's lock held. Running is false once Close returns. When ctx is done
// first the error is "<name>: stopping: <ctx's error>" and nothing is
// released.
func (l *Loop) Close(ctx context.Context, name string, release func() error) error {
	l.mu.Lock()
	done := l.done
	if done == nil {
		l.mu.Unlock()
		return nil
	}
	l.cancel()
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("%s: stopping: %w", name, ctx.Err())
	}
	if release == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return release()
}

// Baseline sets *base to a fresh snapshot when the loop runs, for probes
// that count from Begin to End. A failed snapshot leaves *base as it was
// and is kept for End to report (see Keep). Call it with the probe's lock
// held, as snapshot expects.
func Baseline[S any](l *Loop, base *S, snapshot func() (S, error)) {
	if !l.Running() {
		return
	}
	s, err := snapshot()
	if err != nil {
		l.Keep(err)
		return
	}
	*base = s
}

// Append writes rec to file of out unless ctx is done. Its error is ctx's
// or "<name>: writing <file>: ...".
func Append(ctx context.Context, out probe.Sink, name, file string, rec any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := out.Append(file, rec); err != nil {
		return fmt.Errorf("%s: writing %s: %w", name, file, err)
	}
	return nil
}

// Sub returns a - b, or 0 when b > a: what a counter of a thread grew by
// between two reads, where a torn read or a reused tid may make it seem to
// go back.
func Sub(a, b uint64) uint64 {
	return a - min(a, b)
}

// ThreadOrder returns the keys of threads (by thread id) sorted by their
// process, then by thread id: the order the probes write records in.
func ThreadOrder[K ~int | ~uint32, V any](threads map[K]V, pid func(V) int) []K {
	return slices.SortedFunc(maps.Keys(threads), func(a, b K) int {
		return cmp.Or(cmp.Compare(pid(threads[a]), pid(threads[b])), cmp.Compare(a, b))
	})
}
