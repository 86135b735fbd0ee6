package watch

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/probe"
)

func TestPids(t *testing.T) {
	self := os.Getpid()
	got := Pids(probe.Target{PID: self})
	if !slices.Contains(got, self) {
		t.Errorf("Pids(%d) = %v, want it to hold %d", self, got, self)
	}
	n := len(got)
	got = Pids(probe.Target{PID: self, Children: func() []int { return []int{1 << 30, self} }})
	if len(got) != n+2 || got[n] != 1<<30 || got[n+1] != self {
		t.Errorf("Pids with Children = %v, want the descendants then Children's pids, as they come", got)
	}
}

func TestLoop(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	errA, errB := errors.New("a"), errors.New("b")
	l := NewLoop(&mu, time.Millisecond, func() error {
		calls++
		if calls == 1 {
			return errA
		}
		return errB
	})
	released := false
	release := func() error { released = true; return nil }
	if err := l.Close(context.Background(), "t", release); released || err != nil {
		t.Fatalf("Close before Start released %v, %v; want false, nil", released, err)
	}
	mu.Lock()
	if l.Running() {
		t.Error("Running before Start")
	}
	l.Start()
	if !l.Running() {
		t.Error("not Running after Start")
	}
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refresh ran %d times in 10 s, want at least 2", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	if err := l.TakeErr(); err != errA {
		t.Errorf("TakeErr = %v, want the first error %v", err, errA)
	}
	l.Keep(nil)
	if err := l.TakeErr(); err != nil && err != errB {
		t.Errorf("TakeErr after taking = %v, want nil or %v", err, errB)
	}
	mu.Unlock()
	if err := l.Close(context.Background(), "t", release); !released || err != nil {
		t.Fatalf("Close released %v, %v; want true, nil", released, err)
	}
	mu.Lock()
	if l.Running() {
		t.Error("Running after Close")
	}
	n := calls
	l.Keep(errB)
	l.Keep(errA)
	if err := l.TakeErr(); err != errB {
		t.Errorf("TakeErr = %v, want the first kept %v", err, errB)
	}
	mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	if calls != n {
		t.Errorf("refresh ran %d more times after Close", calls-n)
	}
	mu.Unlock()
	released = false
	if err := l.Close(context.Background(), "t", release); released || err != nil {
		t.Errorf("second Close released %v, %v; want false, nil", released, err)
	}
}

// hungLoop returns a started loop whose refresh is under way and waits,
// without holding the lock, until release is closed: Close can cancel it
// but not see the goroutine end.
func hungLoop(mu *sync.Mutex) (l *Loop, release chan struct{}) {
	entered := make(chan struct{})
	release = make(chan struct{})
	var once sync.Once
	l = NewLoop(mu, time.Millisecond, func() error {
		mu.Unlock()
		once.Do(func() { close(entered) })
		<-release
		mu.Lock()
		return nil
	})
	mu.Lock()
	l.Start()
	mu.Unlock()
	<-entered
	return l, release
}

func TestLoopCloseHonoursContext(t *testing.T) {
	var mu sync.Mutex
	l, release := hungLoop(&mu)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := l.Close(ctx, "t", func() error { t.Error("released after a Close that gave up waiting"); return nil })
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "t: stopping: context deadline exceeded" {
		t.Errorf("Close with a hung refresh = %v; want t: stopping: %v", err, context.DeadlineExceeded)
	}
	mu.Lock()
	if l.Running() {
		t.Error("Running after a Close that gave up waiting")
	}
	mu.Unlock()
	close(release)
}

func TestBaseline(t *testing.T) {
	var mu sync.Mutex
	l := NewLoop(&mu, time.Hour, func() error { return nil })
	base := 1
	Baseline(l, &base, func() (int, error) { return 2, nil })
	if base != 1 {
		t.Fatalf("a stopped loop took a baseline: %d", base)
	}
	mu.Lock()
	l.Start()
	mu.Unlock()
	defer l.Close(context.Background(), "t", nil)
	mu.Lock()
	Baseline(l, &base, func() (int, error) { return 3, nil })
	Baseline(l, &base, func() (int, error) { return 4, errors.New("snapshot failed") })
	err := l.TakeErr()
	mu.Unlock()
	if base != 3 || err == nil || err.Error() != "snapshot failed" {
		t.Fatalf("base %d, kept error %v; want 3 and the snapshot error", base, err)
	}
}

func TestThreadOrder(t *testing.T) {
	threads := map[uint32]int{9: 2, 3: 2, 7: 1, 1: 3} // tid → pid
	got := ThreadOrder(threads, func(pid int) int { return pid })
	want := []uint32{7, 3, 9, 1}
	if !slices.Equal(got, want) {
		t.Errorf("ThreadOrder = %v, want %v (by pid, then tid)", got, want)
	}
}

func TestLoopClose(t *testing.T) {
	var mu sync.Mutex
	l := NewLoop(&mu, time.Hour, func() error { return nil })
	released := 0
	release := func() error {
		if mu.TryLock() {
			mu.Unlock()
			t.Error("release called without the lock held")
		}
		released++
		return errors.New("closing failed")
	}
	if err := l.Close(context.Background(), "x", release); err != nil || released != 0 {
		t.Fatalf("Close before Start = %v, released %d times; want nil, 0", err, released)
	}
	mu.Lock()
	l.Start()
	mu.Unlock()
	if err := l.Close(context.Background(), "x", release); err == nil || err.Error() != "closing failed" || released != 1 {
		t.Fatalf("Close = %v, released %d times; want release's error, once", err, released)
	}
	if err := l.Close(context.Background(), "x", nil); err != nil {
		t.Fatalf("second Close = %v", err)
	}

	// A stop that ctx cuts short says so and releases nothing.
	l, hold := hungLoop(&mu)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := l.Close(ctx, "x", release)
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "x: stopping: "+context.DeadlineExceeded.Error() || released != 1 {
		t.Errorf("Close with a hung refresh = %v, released %d times; want x: stopping: %v, still once", err, released, context.DeadlineExceeded)
	}
	close(hold)
}

func TestSub(t *testing.T) {
	for _, tt := range []struct{ a, b, want uint64 }{{5, 3, 2}, {3, 3, 0}, {3, 5, 0}} {
		if got := Sub(tt.a, tt.b); got != tt.want {
			t.Errorf("Sub(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
