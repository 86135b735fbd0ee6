package fakeasr

// The Server's counters that only this package's tests read.

// MaxActive returns the largest number of requests that were processed at
// the same time (admitted and not yet answered).
func (s *Server) MaxActive() int { return locked(s, func() int { return s.maxActive }) }

// Succeeded returns how many transcription requests were answered with a
// transcript: vllm:request_success_total on /metrics.
func (s *Server) Succeeded() int { return locked(s, func() int { return s.succeeded }) }
