package capture

import (
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/probe"
)

// Observer sees what a capture records while it records it: asrprof
// serve's live /metrics. Its methods are called from many goroutines
// (requests finish concurrently, probes write from their own loops) and
// must not block: the capture waits for them.
type Observer interface {
	// RequestStarted is called as the driver sends a request.
	RequestStarted()
	// RequestDone is called with every finished request (warmup included).
	RequestDone(r *model.Request)
	// ProbeRecord is called with every record a probe appends, before it
	// is written: the probe's name, the bundle file and the probe's own
	// record type (*bundle.GPURecord, bundle.SchedRecord, bundle.CUDARecord, ...).
	ProbeRecord(probe, file string, rec any)
	// PeriodEnded is called when a pass (a probe period) has ended and
	// the probes have written its records.
	PeriodEnded(p probe.Period)
}

// Observe makes the session show what it records to o. Call it before Run.
func (s *Session) Observe(o Observer) *Session {
	s.obs = o
	return s
}
