// Package gpu is the GPU probe: it samples NVML (through go-nvml, which
// needs cgo and dlopens libnvidia-ml.so.1 at Start) from one poller
// goroutine and appends one JSON object per sample to gpu.jsonl.
//
// Every record starts with
//
//	{"ts_unix_ns": int64, "gpu": NVML index, "kind": KIND, ...}
//
// and the kinds add:
//
//	device   "name","uuid","gpm":bool,"driver"          once per GPU at Start
//	util     "util_pct"                                  GetSamples(GPU_UTILIZATION_SAMPLES)
//	power    "power_w"                                   GetSamples(TOTAL_POWER_SAMPLES), mW/1000
//	mem      "used_mib","total_mib"                      GetMemoryInfo
//	clock    "sm_mhz","mem_mhz"                          GetClockInfo(CLOCK_SM, CLOCK_MEM)
//	temp     "temp_c"                                    GetTemperature(TEMPERATURE_GPU)
//	throttle "reasons":mask,"names":[...]                GetCurrentClocksEventReasons
//	proc     "pid","sm_pct","mem_pct","enc_pct","dec_pct" GetProcessUtilization, target pids only
//	gpm      "window_s","sm_active_pct","sm_occupancy_pct","tensor_active_pct","dram_bw_pct"
//	pcie     "tx_kib_s","rx_kib_s"                       GetPcieThroughput (Config.PCIe)
//	period   "level","repeat","warmup","start_unix_ns","end_unix_ns",
//	         "util_mean","util_max","mem_used_max_mib","power_mean_w","power_max_w",
//	         "sm_active_mean","sm_occupancy_mean","tensor_active_mean","dram_bw_mean",
//	         "sm_clock_mean_mhz","temp_max_c","throttle_reasons","throttle_names",
//	         "util_samples","power_samples","gpm_samples"   one per GPU at End
//
// Percentages are 0-100. Throttle names: gpu_idle, applications_clocks_setting,
// sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown,
// hw_thermal_slowdown, hw_power_brake_slowdown, display_clock_setting
// (other bits as "0x..."). A gpm metric NVML did not return is omitted; so
// is a period mean or maximum with no sample in the pass.
//
// Timestamps. util, power and proc records carry NVML's own sample time
// (unix µs, times 1000); the others carry the system clock when the call
// returned (time.Now). NVML's clock is the host's wall clock; Probe.ClockOffset
// estimates NVML minus system (measured on the H200: -1 to -6 ms, a lower
// bound within the 20 ms power cadence) for the manifest. Timestamps in
// gpu.jsonl are not corrected by it.
//
// Cadence. Everything is polled every Config.Interval (100 ms, at most 1 s:
// the power buffer holds ~2.4 s at one sample per ~20 ms, the utilization
// buffer ~14 s at one per ~200 ms). Buffered samples are read incrementally
// from the newest timestamp seen, starting at Start's time, so none is
// written twice. GPM metrics cover Config.GPMWindow (1 s): each window's
// closing GpmSampleGet opens the next, on GPUs where GpmQueryDeviceSupport
// says supported. Per-process samples are filtered to Target.PID and
// Target.Children() (refreshed every second); with no pid, none are read.
// PCIe throughput blocks ~20 ms per counter in NVML, so it is read from a
// second goroutine, and only when Config.PCIe is set.
//
// Periods. Begin opens a pass (from Period.StartUnixNs, or now); End closes
// it (Period.EndUnixNs, or now), has the poller poll once more so samples
// up to the end are read, and writes one period record per GPU from the
// samples whose timestamps fall inside the pass.
//
// Timeouts. NVML calls cannot be cancelled; all of them run on the probe's
// goroutines (Init and device setup on one of their own), and Start, End
// and Stop wait for them only until their ctx ends: a hung driver call
// costs its goroutine, never the capture. A call that answers
// ERROR_NOT_SUPPORTED is not repeated for that GPU; failures are counted
// in Stats.
//
// Not supported. Start returns a *NoNVMLError ("no NVML: <reason>", which
// wraps probe.ErrNotSupported) when NVML cannot be initialised, and an
// error wrapping probe.ErrNotSupported when NVML sees no GPU.
//
// Permissions: none beyond reading /dev/nvidia* (root not needed; other
// users' per-process samples may need it on some drivers). Cost, measured on
// the H200 with one GPU: 330 records (~40 KB) per 3 s, i.e. ~110 records/s
// per GPU (power dominates at 50/s); each poll is a dozen NVML calls.
//
// Inspect does a one-off check (driver, devices, GPM support, clock
// offset) for asrprof doctor.
package gpu
