package load

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestClosedKeepsExactlyNInFlight(t *testing.T) {
	var inflight, peak atomic.Int64
	var seen sync.Map
	n := Closed(context.Background(), context.Background(), 40, 8, func(ctx context.Context, i int, _ time.Time) {
		cur := inflight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		if _, dup := seen.LoadOrStore(i, true); dup {
			t.Errorf("index %d sent twice", i)
		}
		time.Sleep(5 * time.Millisecond)
		inflight.Add(-1)
	})
	if n != 40 || peak.Load() != 8 {
		t.Fatalf("started %d, peak in flight %d; want 40 and 8", n, peak.Load())
	}
}

func TestClosedStops(t *testing.T) {
	stop, cancel := context.WithCancel(context.Background())
	var done atomic.Int64
	n := Closed(stop, context.Background(), 1000, 4, func(ctx context.Context, i int, _ time.Time) {
		if done.Add(1) == 10 {
			cancel()
		}
		time.Sleep(time.Millisecond)
	})
	if n >= 1000 || n < 10 || int64(n) != done.Load() {
		t.Fatalf("started %d, finished %d", n, done.Load())
	}
}

func TestSchedule(t *testing.T) {
	c := Schedule(5, 10, Constant, 1)
	for i, d := range c {
		if d != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("constant offsets %v", c)
		}
	}
	p1 := Schedule(2000, 50, Poisson, 7)
	p2 := Schedule(2000, 50, Poisson, 7)
	for i := range p1 {
		if p1[i] != p2[i] {
			t.Fatal("Poisson schedule not deterministic for a seed")
		}
	}
	// Mean inter-arrival ≈ 1/rate = 20 ms (2000 samples: within 10 %).
	mean := p1[len(p1)-1].Seconds() / float64(len(p1)-1)
	if mean < 0.018 || mean > 0.022 {
		t.Errorf("mean gap %.4fs, want ≈0.020s", mean)
	}
	if Schedule(3, 10, Poisson, 8)[1] == p1[1] {
		t.Error("different seeds gave the same schedule")
	}
}

// A server with room for one request at a time and 20 ms of work each.
type slowServer struct{ sem chan struct{} }

func (s *slowServer) serve() {
	s.sem <- struct{}{}
	time.Sleep(20 * time.Millisecond)
	<-s.sem
}

// The closed loop at concurrency 1 never sees the server's queue; the open
// loop at twice its capacity does, because latency counts from the
// intended send time.
func TestOpenLoopShowsQueueingClosedLoopHides(t *testing.T) {
	lat := func(open bool) []time.Duration {
		srv := &slowServer{sem: make(chan struct{}, 1)}
		var mu sync.Mutex
		var out []time.Duration
		task := func(ctx context.Context, i int, intended time.Time) {
			srv.serve()
			mu.Lock()
			out = append(out, time.Since(intended))
			mu.Unlock()
		}
		if open {
			Open(context.Background(), context.Background(), Schedule(30, 100, Constant, 1), task)
		} else {
			Closed(context.Background(), context.Background(), 30, 1, task)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	closed, open := lat(false), lat(true)
	if p := closed[len(closed)-1]; p > 60*time.Millisecond {
		t.Errorf("closed loop max latency %v, want ≈20ms", p)
	}
	// 30 arrivals every 10 ms into a 20 ms server: the last waits ≈300 ms.
	if p := open[len(open)-1]; p < 200*time.Millisecond {
		t.Errorf("open loop max latency %v, want the queue (≥200ms) to show", p)
	}
}

// 20 arrivals at 200/s on a constant schedule: by hand, request i is
// intended 5 ms × i after the first, and the first within 5 ms of the
// call; each leaves within 20 ms of its intended time.
func TestOpenSendsOnSchedule(t *testing.T) {
	offs := Schedule(20, 200, Constant, 1)
	var mu sync.Mutex
	var late []time.Duration
	intended := make([]time.Time, len(offs))
	start := time.Now()
	Open(context.Background(), context.Background(), offs, func(ctx context.Context, i int, at time.Time) {
		mu.Lock()
		late = append(late, time.Since(at))
		intended[i] = at
		mu.Unlock()
	})
	if d := intended[0].Sub(start); d < 0 || d > 5*time.Millisecond {
		t.Errorf("the first request intended %v after the call, want within 5 ms", d)
	}
	for i := 1; i < len(intended); i++ {
		if d := intended[i].Sub(intended[0]); d != time.Duration(i)*5*time.Millisecond {
			t.Errorf("request %d intended %v after the first, want %v", i, d, time.Duration(i)*5*time.Millisecond)
		}
	}
	for _, l := range late {
		if l > 20*time.Millisecond {
			t.Errorf("a request left %v after its intended time", l)
		}
	}
}
