package bundle

// The per-thread time bins, one ThreadBins per thread per pass: the sched
// probe's (on-CPU, run-queue), the proc probe's (the same, from /proc
// schedstat: no root needed) and the cuda probe's (inside a blocking CUDA
// call).
const (
	SchedBinsFile = "sched_bins.jsonl"
	ProcBinsFile  = "proc_bins.jsonl"
	CUDABinsFile  = "cuda_bins.jsonl"
)

// ThreadBins is one line of sched_bins.jsonl, proc_bins.jsonl or
// cuda_bins.jsonl: one thread's time over one pass, in bins of BinMs from
// StartUnixNs (the pass's start on the probe host's wall clock, that of
// the server's spans and events; the same for the same pass in every
// file). Bin i covers [StartUnixNs + i·BinMs, StartUnixNs + (i+1)·BinMs),
// all bins whole: the last one ends up to BinMs after the pass. The arrays
// have ceil(pass wall / BinMs) bins.
//
// OnCPUUs[i] and RunqUs[i] (sched, proc) are the microseconds of bin i the
// thread spent on a CPU and runnable waiting for one; the rest of the bin
// it was off-CPU (blocked, sleeping, or not yet or no longer alive).
// SyncUs[i] (cuda) is the microseconds of bin i it spent inside one of the
// CUDA driver's blocking calls, spinning or asleep; a call made inside
// another counts once.
type ThreadBins struct {
	Level       string `json:"level"`
	Repeat      int    `json:"repeat"`
	Warmup      bool   `json:"warmup"`
	PID         int    `json:"pid"`
	TID         int    `json:"tid"`
	Name        string `json:"name"`
	StartUnixNs int64  `json:"start_unix_ns"`
	BinMs       int    `json:"bin_ms"`
	OnCPUUs     []int  `json:"oncpu_us,omitempty"`
	RunqUs      []int  `json:"runq_us,omitempty"`
	SyncUs      []int  `json:"sync_us,omitempty"`
	// DroppedEvents is how many intervals (sched), calls (cuda) or thread
	// samples (proc) the pass lost, over all threads; 0 normally.
	DroppedEvents uint64 `json:"dropped_events"`
	Source        string `json:"source,omitempty"` // "proc" in proc_bins.jsonl
}
