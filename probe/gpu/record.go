package gpu

// Kinds of gpu.jsonl records.
const (
	KindDevice   = "device"
	KindUtil     = "util"
	KindPower    = "power"
	KindMem      = "mem"
	KindClock    = "clock"
	KindTemp     = "temp"
	KindThrottle = "throttle"
	KindProc     = "proc"
	KindGPM      = "gpm"
	KindPCIe     = "pcie"
	KindPeriod   = "period"
)

// Head is the part every gpu.jsonl record starts with.
type Head struct {
	TS   int64  `json:"ts_unix_ns"`
	GPU  int    `json:"gpu"`
	Kind string `json:"kind"`
}

func (h Head) head() Head { return h }

// accumulate is that of the records that add nothing to a period's summary.
func (Head) accumulate(*periodAcc) {}

// record is one gpu.jsonl line; accumulate adds it to a period's summary.
type record interface {
	head() Head
	accumulate(a *periodAcc)
}

// DeviceRecord describes a GPU once, at Start.
type DeviceRecord struct {
	Head
	Name   string `json:"name"`
	UUID   string `json:"uuid"`
	GPM    bool   `json:"gpm"`
	Driver string `json:"driver"`
}

// UtilRecord is one NVML GPU_UTILIZATION sample: percent of the sample
// period during which a kernel ran.
type UtilRecord struct {
	Head
	UtilPct float64 `json:"util_pct"`
}

// PowerRecord is one NVML TOTAL_POWER sample, in watts.
type PowerRecord struct {
	Head
	PowerW float64 `json:"power_w"`
}

// MemRecord is the device memory in use, in MiB.
type MemRecord struct {
	Head
	UsedMiB  float64 `json:"used_mib"`
	TotalMiB float64 `json:"total_mib"`
}

// ClockRecord is the current SM and memory clocks, in MHz.
type ClockRecord struct {
	Head
	SMMHz  uint32 `json:"sm_mhz"`
	MemMHz uint32 `json:"mem_mhz"`
}

// TempRecord is the GPU die temperature, in °C.
type TempRecord struct {
	Head
	TempC uint32 `json:"temp_c"`
}

// ThrottleRecord is the clocks-event (throttle) reasons mask and its names.
type ThrottleRecord struct {
	Head
	Reasons uint64   `json:"reasons"`
	Names   []string `json:"names"`
}

// ProcRecord is one NVML per-process utilization sample (percent of the
// sample period) of a target process, or of another process on the same
// GPU (Other: a co-tenant; NVML's pids are the host's, so in a container
// the target's own may read as other: the validity check compares them).
type ProcRecord struct {
	Head
	PID    int    `json:"pid"`
	SMPct  uint32 `json:"sm_pct"`
	MemPct uint32 `json:"mem_pct"`
	EncPct uint32 `json:"enc_pct"`
	DecPct uint32 `json:"dec_pct"`
	Other  bool   `json:"other,omitempty"`
}

// GPMRecord holds GPM metrics over one window ending at TS, in percent.
// A metric NVML did not return is omitted.
type GPMRecord struct {
	Head
	WindowS         float64  `json:"window_s"`
	SMActivePct     *float64 `json:"sm_active_pct,omitempty"`
	SMOccupancyPct  *float64 `json:"sm_occupancy_pct,omitempty"`
	TensorActivePct *float64 `json:"tensor_active_pct,omitempty"`
	DRAMBWPct       *float64 `json:"dram_bw_pct,omitempty"`
}

// PCIeRecord is PCIe throughput over NVML's ~20 ms window, in KiB/s.
type PCIeRecord struct {
	Head
	TxKiBs uint32 `json:"tx_kib_s"`
	RxKiBs uint32 `json:"rx_kib_s"`
}

// PeriodRecord summarises one GPU over one pass, written at End. Means
// and maxima of kinds that had no sample in the pass are omitted.
type PeriodRecord struct {
	Head
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

// agg is a running mean and maximum.
type agg struct {
	sum, max float64
	n        int
}

func (a *agg) add(v float64) {
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.sum += v
	a.n++
}

func (a *agg) meanPtr() *float64 {
	if a.n == 0 {
		return nil
	}
	m := a.sum / float64(a.n)
	return &m
}

func (a *agg) maxPtr() *float64 {
	if a.n == 0 {
		return nil
	}
	m := a.max
	return &m
}

// periodAcc accumulates one GPU's samples over a pass.
type periodAcc struct {
	util, power, memUsed, smActive, smOcc, tensor, dram, smClock, temp agg
	throttle                                                           uint64
	gpm                                                                int
}

func (r *UtilRecord) accumulate(a *periodAcc)     { a.util.add(r.UtilPct) }
func (r *PowerRecord) accumulate(a *periodAcc)    { a.power.add(r.PowerW) }
func (r *MemRecord) accumulate(a *periodAcc)      { a.memUsed.add(r.UsedMiB) }
func (r *ClockRecord) accumulate(a *periodAcc)    { a.smClock.add(float64(r.SMMHz)) }
func (r *TempRecord) accumulate(a *periodAcc)     { a.temp.add(float64(r.TempC)) }
func (r *ThrottleRecord) accumulate(a *periodAcc) { a.throttle |= r.Reasons }
func (r *GPMRecord) accumulate(a *periodAcc) {
	a.gpm++
	for _, m := range []struct {
		v *float64
		a *agg
	}{{r.SMActivePct, &a.smActive}, {r.SMOccupancyPct, &a.smOcc}, {r.TensorActivePct, &a.tensor}, {r.DRAMBWPct, &a.dram}} {
		if m.v != nil {
			m.a.add(*m.v)
		}
	}
}

// summary turns an accumulator into the period record for gpu.
func (a *periodAcc) summary(gpu int, level string, repeat int, warmup bool, start, end int64) *PeriodRecord {
	return &PeriodRecord{
		Head:             Head{TS: end, GPU: gpu, Kind: KindPeriod},
		Level:            level,
		Repeat:           repeat,
		Warmup:           warmup,
		StartUnixNs:      start,
		EndUnixNs:        end,
		UtilMean:         a.util.meanPtr(),
		UtilMax:          a.util.maxPtr(),
		MemUsedMaxMiB:    a.memUsed.maxPtr(),
		PowerMeanW:       a.power.meanPtr(),
		PowerMaxW:        a.power.maxPtr(),
		SMActiveMean:     a.smActive.meanPtr(),
		SMOccupancyMean:  a.smOcc.meanPtr(),
		TensorActiveMean: a.tensor.meanPtr(),
		DRAMBWMean:       a.dram.meanPtr(),
		SMClockMeanMHz:   a.smClock.meanPtr(),
		TempMaxC:         a.temp.maxPtr(),
		ThrottleReasons:  a.throttle,
		ThrottleNames:    ThrottleNames(a.throttle),
		UtilSamples:      a.util.n,
		PowerSamples:     a.power.n,
		GPMSamples:       a.gpm,
	}
}
