package main

import (
	"os"
	"runtime/debug"
)

// captureGCPercent is the Go garbage collector's target while a capture
// runs, unless $GOGC says otherwise. A load generator's heap is a small
// live set (the dataset, the pass's records) and a stream of short-lived
// request garbage: collecting when the heap has grown by 4× the live heap
// instead of 1× costs less CPU per request and more peak memory (both
// measured in docs/PERFORMANCE.md, "Driver cost per request").
const captureGCPercent = 400

// tuneGC sets captureGCPercent when $GOGC is unset.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(captureGCPercent)
	}
}
