package bundle

// SchedFile holds the sched probe's per-thread scheduler accounting
// (eBPF), or the proc probe's from /proc where the sched probe cannot run:
// one SchedRecord per thread per pass.
const SchedFile = "sched.jsonl"

// SchedRecord is one line of sched.jsonl: one thread over one period.
type SchedRecord struct {
	Level   string  `json:"level"`
	Repeat  int     `json:"repeat"`
	Warmup  bool    `json:"warmup"`
	PID     int     `json:"pid"`
	TID     int     `json:"tid"`
	Name    string  `json:"name"`
	CPUSec  float64 `json:"cpu_s"`
	WallSec float64 `json:"wall_s"`
	// Utilization is CPUSec/WallSec: 1 is one core for the whole period.
	Utilization float64 `json:"utilization"`
	// What only the eBPF probe measures (nil in the proc probe's lines).
	*SchedRunq
	// RunqWaitSec is the time spent runnable, waiting for a CPU.
	RunqWaitSec float64 `json:"runq_wait_s"`
	// RunqHist (eBPF) is the period's run-queue latency histogram: bucket
	// 0 counts waits under 1 µs, bucket k ≥ 1 those in [2^(k-1), 2^k) µs
	// (the last also longer ones); trailing empty buckets are left out.
	RunqHist    []uint64 `json:"runq_hist_log2_us,omitempty"`
	Voluntary   uint64   `json:"voluntary_switches"`
	Involuntary uint64   `json:"involuntary_switches"`
	Source      string   `json:"source"` // "ebpf" (sched probe) or "proc"
}

// SchedRunq is the part of a SchedRecord that only the eBPF sched probe
// measures.
type SchedRunq struct {
	// OffCPUSec is time switched out (blocked or waiting for a CPU).
	OffCPUSec float64 `json:"offcpu_s"`
	// Run-queue latency: from wake-up (or preemption) to running again.
	// Percentiles are interpolated inside log2 µs buckets.
	RunqP50us float64 `json:"runq_p50_us"`
	RunqP99us float64 `json:"runq_p99_us"`
	RunqCount uint64  `json:"runq_count"`
}
