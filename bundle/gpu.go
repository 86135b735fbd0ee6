package bundle

// GPUFile holds the gpu probe's NVML records (docs/PROBES.md): one
// GPURecord a line.
const GPUFile = "gpu.jsonl"

// Kinds of gpu.jsonl records (GPURecord.Kind).
const (
	GPUKindDevice   = "device"
	GPUKindUtil     = "util"
	GPUKindPower    = "power"
	GPUKindMem      = "mem"
	GPUKindClock    = "clock"
	GPUKindTemp     = "temp"
	GPUKindThrottle = "throttle"
	GPUKindProc     = "proc"
	GPUKindGPM      = "gpm"
	GPUKindPCIe     = "pcie"
	GPUKindPeriod   = "period"
)

// GPURecord is one line of gpu.jsonl: the head every line starts with and
// the fields of its kind, the one of the pointers that is not nil (JSON
// leaves the others out, and fills the one whose fields a line has).
type GPURecord struct {
	GPUHead
	*GPUDevice
	*GPUUtil
	*GPUPower
	*GPUMem
	*GPUClock
	*GPUTemp
	*GPUThrottle
	*GPUProc
	*GPUGPM
	*GPUPCIe
	*GPUPeriod
}

// GPUHead is the part every gpu.jsonl record starts with.
type GPUHead struct {
	TS   int64  `json:"ts_unix_ns"`
	GPU  int    `json:"gpu"`
	Kind string `json:"kind"`
}

// GPUDevice describes a GPU once, at Start.
type GPUDevice struct {
	Name   string `json:"name"`
	UUID   string `json:"uuid"`
	GPM    bool   `json:"gpm"`
	Driver string `json:"driver"`
}

// GPUUtil is one NVML GPU_UTILIZATION sample: percent of the sample
// period during which a kernel ran.
type GPUUtil struct {
	UtilPct float64 `json:"util_pct"`
}

// GPUPower is one NVML TOTAL_POWER sample, in watts.
type GPUPower struct {
	PowerW float64 `json:"power_w"`
}

// GPUMem is the device memory in use, in MiB.
type GPUMem struct {
	UsedMiB  float64 `json:"used_mib"`
	TotalMiB float64 `json:"total_mib"`
}

// GPUClock is the current SM and memory clocks, in MHz.
type GPUClock struct {
	SMMHz  uint32 `json:"sm_mhz"`
	MemMHz uint32 `json:"mem_mhz"`
}

// GPUTemp is the GPU die temperature, in °C.
type GPUTemp struct {
	TempC uint32 `json:"temp_c"`
}

// GPUThrottle is the clocks-event (throttle) reasons mask and its names.
type GPUThrottle struct {
	Reasons uint64   `json:"reasons"`
	Names   []string `json:"names"`
}

// GPUProc is one NVML per-process utilization sample of a target
// process (percent of the sample period).
type GPUProc struct {
	PID    int    `json:"pid"`
	SMPct  uint32 `json:"sm_pct"`
	MemPct uint32 `json:"mem_pct"`
	EncPct uint32 `json:"enc_pct"`
	DecPct uint32 `json:"dec_pct"`
	// Other: a process outside the target's tree on the same GPU (a
	// co-tenant; NVML's pids are the host's, so in a container the
	// target's own may read as other: the validity check compares them).
	Other bool `json:"other,omitempty"`
}

// GPUGPM holds GPM metrics over one window ending at the record's TS, in percent.
// A metric NVML did not return is omitted.
type GPUGPM struct {
	WindowS         float64  `json:"window_s"`
	SMActivePct     *float64 `json:"sm_active_pct,omitempty"`
	SMOccupancyPct  *float64 `json:"sm_occupancy_pct,omitempty"`
	TensorActivePct *float64 `json:"tensor_active_pct,omitempty"`
	DRAMBWPct       *float64 `json:"dram_bw_pct,omitempty"`
}

// GPUPCIe is PCIe throughput over NVML's ~20 ms window, in KiB/s.
type GPUPCIe struct {
	TxKiBs uint32 `json:"tx_kib_s"`
	RxKiBs uint32 `json:"rx_kib_s"`
}

// GPUPeriod summarises one GPU over one pass, written at End. Means
// and maxima of kinds that had no sample in the pass are omitted.
type GPUPeriod struct {
	Level            string   `json:"level"`
	Repeat           int      `json:"repeat"`
	Warmup           bool     `json:"warmup"`
	StartUnixNs      int64    `json:"start_unix_ns"`
	EndUnixNs        int64    `json:"end_unix_ns"`
	UtilMean         *float64 `json:"util_mean,omitempty"`
	UtilMax          *float64 `json:"util_max,omitempty"`
	MemUsedMaxMiB    *float64 `json:"mem_used_max_mib,omitempty"`
	PowerMeanW       *float64 `json:"power_mean_w,omitempty"`
	PowerMaxW        *float64 `json:"power_max_w,omitempty"`
	SMActiveMean     *float64 `json:"sm_active_mean,omitempty"`
	SMOccupancyMean  *float64 `json:"sm_occupancy_mean,omitempty"`
	TensorActiveMean *float64 `json:"tensor_active_mean,omitempty"`
	DRAMBWMean       *float64 `json:"dram_bw_mean,omitempty"`
	SMClockMeanMHz   *float64 `json:"sm_clock_mean_mhz,omitempty"`
	TempMaxC         *float64 `json:"temp_max_c,omitempty"`
	ThrottleReasons  uint64   `json:"throttle_reasons"`
	ThrottleNames    []string `json:"throttle_names"`
	UtilSamples      int      `json:"util_samples"`
	PowerSamples     int      `json:"power_samples"`
	GPMSamples       int      `json:"gpm_samples"`
}
