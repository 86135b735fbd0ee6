package columns

import (
	"math"
	"runtime/debug"
	"testing"
)

// limitHeap's limits add up over builds under way at once, each release
// takes back its own (once), the last one lifts the limit, and a limit set
// before (GOMEMLIMIT) is left alone.
func TestLimitHeap(t *testing.T) {
	old := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(old)
	lim := func() int64 { return debug.SetMemoryLimit(-1) }
	r1 := limitHeap(100 << 20)
	l1 := lim()
	if l1 < 100<<20 || l1 > 100<<20+heapLimit.base || heapLimit.base <= 0 {
		t.Fatalf("one build of 100 MiB: limit %d, base %d", l1, heapLimit.base)
	}
	r2 := limitHeap(50 << 20)
	if got := lim(); got != l1+50<<20 {
		t.Errorf("two builds: limit %d, want %d", got, l1+50<<20)
	}
	r1()
	r1()
	if got := lim(); got != l1-50<<20 {
		t.Errorf("the first released (twice): limit %d, want %d", got, l1-50<<20)
	}
	r2()
	if got := lim(); got != math.MaxInt64 {
		t.Errorf("both released: limit %d, want none", got)
	}
	debug.SetMemoryLimit(200 << 20) // as GOMEMLIMIT=200MiB sets it
	r := limitHeap(1 << 30)
	if got := lim(); got != 200<<20 {
		t.Errorf("under GOMEMLIMIT: limit %d, want the user's %d", got, 200<<20)
	}
	r()
	if got := lim(); got != 200<<20 {
		t.Errorf("under GOMEMLIMIT, released: limit %d, want the user's %d", got, 200<<20)
	}
}
