package columns

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapLimit is the soft memory limit (runtime/debug.SetMemoryLimit) held
// while tables are built from a large bundle's JSONL. Without one the
// garbage collector lets the heap run further ahead of what is live the
// more cores allocate at once: 100,000 requests' tables peaked at 262 MB
// on 2 cores and at 330–343 MB with GOMAXPROCS=16 (docs/PERFORMANCE.md,
// run U), past the 300 MB the build is held to.
var heapLimit struct {
	sync.Mutex
	users      int
	base, want int64
}

// limitHeap asks the garbage collector to keep the Go heap within n bytes
// more than it holds now, until release is called; builds under way at
// once add up. Where a limit was set already (GOMEMLIMIT), it is left as
// it is. The limit is soft: where the live heap needs more, the collector
// gives way rather than spend more than half the CPU.
func limitHeap(n int64) (release func()) {
	heapLimit.Lock()
	defer heapLimit.Unlock()
	if heapLimit.users == 0 {
		if debug.SetMemoryLimit(-1) != math.MaxInt64 {
			return func() {}
		}
		ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(ms)
		heapLimit.base = int64(ms[0].Value.Uint64())
	}
	heapLimit.users++
	heapLimit.want += n
	debug.SetMemoryLimit(heapLimit.base + heapLimit.want)
	return sync.OnceFunc(func() {
		heapLimit.Lock()
		defer heapLimit.Unlock()
		heapLimit.users--
		heapLimit.want -= n
		if heapLimit.users == 0 {
			debug.SetMemoryLimit(math.MaxInt64)
		} else {
			debug.SetMemoryLimit(heapLimit.base + heapLimit.want)
		}
	})
}

// minLimitBytes: JSONL sources smaller than this build without a limit
// (their heap is small whatever the cores).
const minLimitBytes = 32 << 20
