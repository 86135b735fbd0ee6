package bundle

// SensitivityFile is asrprof sensitivity's result at the top of its --out
// (the diagnosis of any of its runs reads it from there): one
// SensitivityReport.
const SensitivityFile = "sensitivity.json"

// SensitivityReport is sensitivity.json.
type SensitivityReport struct {
	Schema     string           `json:"schema"`
	Kind       string           `json:"kind"` // "cpu" or "gpu-clocks"
	Method     string           `json:"method"`
	MethodNote string           `json:"method_note"`
	Level      string           `json:"level"`
	Allotments []float64        `json:"allotments"`
	Cycles     int              `json:"cycles"`
	Base       string           `json:"base,omitempty"` // what 100 % is: "1 core: 1 busy thread"
	Runs       []SensitivityRun `json:"runs"`
	// Overall is the throughput's: the least-squares slope through the
	// origin of (throughput / the cycle's unrestricted throughput − 1)
	// over (the run's effective allotment − 1), what Against says;
	// PerAllotment the same at each allotment; Stages each stage's, its
	// rate being 1 / its mean duration. The verdict reads Overall.
	Overall      SensitivityEstimate   `json:"overall"`
	Against      string                `json:"against,omitempty"`
	PerAllotment []SensitivityEstimate `json:"per_allotment"`
	// Received is the throughput's slope against the CPU the server
	// received (used cores / the cycle's unrestricted used cores − 1):
	// ≈ 1 where what it lost was work, below where it was spinning.
	Received   *SensitivityEstimate  `json:"received,omitempty"`
	Stages     []SensitivityEstimate `json:"stages,omitempty"`
	Verdict    string                `json:"verdict"`
	Confidence float64               `json:"confidence"`
	Notes      []string              `json:"notes,omitempty"`
}

// SensitivityRun is one run's limit and what it measured.
type SensitivityRun struct {
	Dir       string  `json:"dir"`
	Cycle     int     `json:"cycle"`
	Allotment float64 `json:"allotment"`
	// Effective is the share of the CPU the server could get here that
	// the limit left it, the x of the slope: the allotment, except for a
	// quota where the host's other load held the server below 100 % in
	// the unrestricted run (a quota of 0.5 cores is 68 % of the 0.74
	// cores a thread could get there).
	Effective float64 `json:"effective_allotment,omitempty"`
	// Quota is the CFS quota in cores (cgroup), CPUs the number of CPUs
	// the server was pinned to (affinity, co-runner); BaseCores is 100 %,
	// in cores, and BaseWhy why (unrestricted runs: "2 busy threads").
	Quota     float64 `json:"quota_cores,omitempty"`
	ClockMHz  int     `json:"gpu_clock_mhz,omitempty"` // GPU-clock sessions
	CPUs      int     `json:"cpus,omitempty"`
	BaseCores float64 `json:"base_cores,omitempty"`
	BaseWhy   string  `json:"base_why,omitempty"`
	// UsedCores is the server tree's CPU time over the scored passes /
	// their wall time.
	UsedCores float64 `json:"used_cores"`
	// Unrestricted runs: the busy threads, and the share of their
	// runnable time they spent on a CPU (below 1 where other load took it).
	BusyThreads     []ThreadUse `json:"busy_threads,omitempty"`
	RanWhenRunnable float64     `json:"ran_when_runnable,omitempty"`
	// The co-runner's nice and the CPU its spinners took (cores).
	CoRunnerNice   *int               `json:"corunner_nice,omitempty"`
	CoRunnerCores  float64            `json:"corunner_cores,omitempty"`
	ThrottledS     float64            `json:"throttled_s,omitempty"`
	ThroughputReqS float64            `json:"throughput_req_s"`
	StagesMs       map[string]float64 `json:"stages_ms,omitempty"`
	Error          string             `json:"error,omitempty"`
}

// SensitivityEstimate is a sensitivity with its bootstrap interval over the cycles.
type SensitivityEstimate struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	N     int     `json:"n"` // cycles it is taken over
}

// ThreadUse is one thread's CPU over the scored passes, in cores.
type ThreadUse struct {
	PID   int     `json:"pid"`
	TID   int     `json:"tid"`
	Comm  string  `json:"comm,omitempty"`
	Cores float64 `json:"cores"` // on a CPU
	// WaitCores is the time it was runnable but waiting on a run queue
	// (another thread had the CPU).
	WaitCores float64 `json:"runnable_wait_cores"`
}
