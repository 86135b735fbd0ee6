package main

import (
	"sync"
	"testing"
)

// The package's tests fall in three groups (`make test`'s wall time is
// this package's: docs/PERFORMANCE.md, "make test and its Debian
// packages").
//
//   - Tests whose verdict is the machine's CPU (host-bound and contention
//     verdicts, CPU sensitivity, the driver's self-check, the proxy's
//     latencies against its client's) are not parallel: Go runs them one
//     at a time, before any parallel test starts, so nothing of this
//     package runs beside them.
//   - Tests whose time is a wait (a server's sleeps, a build delay, a
//     throttled upload, a server starting) and whose checks do not depend
//     on how fast the CPU is call t.Parallel: up to five run at once
//     (TestMain's -test.parallel 5), after the first group.
//   - Of those, the ones that keep a core or more busy for long (the
//     whisper engine's PyTorch, the co-runner check's torch imports, the
//     analyses of the H200 bundles) also call cpuHeavy: one at a time, so
//     that they do not pile their CPU on the sleeping ones beside them.
//
// Inside a test of the first group, captures whose verdict is a wait (a
// queue, a sleep per step, a held answer) may run at once, each with a
// server of its own (TestProxyAndDrivenVerdicts, the admission cap's
// agreement with events); a capture that two tests read
// is made once (sharedCaptures, shared_test.go). The reference servers
// load as many decoders as their highest level needs, not the default 8
// (about 0.8 s of CPU each to load).
var cpuHeavyMu sync.Mutex

// cpuHeavy holds the package's CPU-heavy lock until t and its subtests
// end. Call it after t.Parallel.
func cpuHeavy(t *testing.T) {
	t.Helper()
	cpuHeavyMu.Lock()
	t.Cleanup(cpuHeavyMu.Unlock)
}
