package gpu

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/asrprof/asrprof/probe"
)

// library is the part of nvml.Interface the probe calls. Keeping it small
// documents every NVML entry point the probe depends on; tests set exactly
// these functions on a mock.Interface.
type library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	GpmSampleAlloc() (nvml.GpmSample, nvml.Return)
	GpmMetricsGet(*nvml.GpmMetricsGetType) nvml.Return
}

// device is the part of nvml.Device the probe calls.
type device interface {
	GetName() (string, nvml.Return)
	GetUUID() (string, nvml.Return)
	GetSamples(nvml.SamplingType, uint64) (nvml.ValueType, []nvml.Sample, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetClockInfo(nvml.ClockType) (uint32, nvml.Return)
	GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return)
	GetCurrentClocksEventReasons() (uint64, nvml.Return)
	GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return)
	GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return)
	GpmSampleGet(nvml.GpmSample) nvml.Return
	GetPcieThroughput(nvml.PcieUtilCounter) (uint32, nvml.Return)
}

// NoNVMLError is returned (wrapped) when NVML cannot be initialised: no
// driver, no library, no permission. It unwraps to probe.ErrNotSupported.
type NoNVMLError struct {
	Reason string
	Code   nvml.Return
}

func (e *NoNVMLError) Error() string { return "no NVML: " + e.Reason }

// Unwrap makes errors.Is(err, probe.ErrNotSupported) true.
func (e *NoNVMLError) Unwrap() error { return probe.ErrNotSupported }

// reasons are short phrases for the NVML return codes that say why NVML
// cannot be initialised.
var reasons = map[nvml.Return]string{
	nvml.ERROR_LIBRARY_NOT_FOUND:       "library not found (libnvidia-ml.so.1)",
	nvml.ERROR_DRIVER_NOT_LOADED:       "NVIDIA driver not loaded",
	nvml.ERROR_NO_PERMISSION:           "no permission to open the GPU devices",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (reboot or reload the driver)",
	nvml.ERROR_FUNCTION_NOT_FOUND:      "NVML library too old",
}

// within runs f on its own goroutine and waits for it or ctx, whichever
// comes first. NVML calls cannot be interrupted: when ctx ends first, f
// keeps running and finish (if not nil) is called with f's result when it
// does return, so that a late Init is still shut down.
func within[T any](ctx context.Context, f func() T, finish func(T)) (T, error) {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		if finish != nil {
			go func() { finish(<-ch) }()
		}
		var zero T
		return zero, ctx.Err()
	}
}

// initLib calls lib.Init within ctx. On failure it returns a *NoNVMLError.
func initLib(ctx context.Context, lib library) error {
	r, err := within(ctx, lib.Init, func(r nvml.Return) {
		if r == nvml.SUCCESS {
			lib.Shutdown()
		}
	})
	if err != nil {
		return fmt.Errorf("gpu: NVML init: %w", err)
	}
	if r != nvml.SUCCESS {
		return &NoNVMLError{Reason: cmp.Or(reasons[r], r.Error()), Code: r}
	}
	return nil
}

// Value decodes one NVML sample value of type vt. NVML fills the union's
// 8 bytes in host order; for unsigned types only the low 4 bytes are
// valid (measured on the H200 driver: the high bytes hold garbage), so
// they are read as uint32 (uint16 for UNSIGNED_SHORT). It returns false
// for an unknown type.
func Value(vt nvml.ValueType, b [8]byte) (float64, bool) {
	e := binary.NativeEndian
	switch vt {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(e.Uint64(b[:])), true
	case nvml.VALUE_TYPE_UNSIGNED_INT, nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(e.Uint32(b[:4])), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(e.Uint16(b[:2])), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(e.Uint64(b[:]))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(e.Uint32(b[:4]))), true
	}
	return 0, false
}

// usToNs converts an NVML timestamp (unix microseconds) to unix nanoseconds.
func usToNs(us uint64) int64 { return int64(us) * 1000 }

// Throttle reason bits (nvmlClocksEventReason*), named as in gpu.jsonl.
var throttleNames = map[uint64]string{
	0x1:   "gpu_idle",
	0x2:   "applications_clocks_setting",
	0x4:   "sw_power_cap",
	0x8:   "hw_slowdown",
	0x10:  "sync_boost",
	0x20:  "sw_thermal_slowdown",
	0x40:  "hw_thermal_slowdown",
	0x80:  "hw_power_brake_slowdown",
	0x100: "display_clock_setting",
}

// ThrottleNames names the bits set in a clocks-event reasons mask. Unknown
// bits are named by their hexadecimal value.
func ThrottleNames(mask uint64) []string {
	names := []string{}
	for bit := uint64(1); mask != 0; bit <<= 1 {
		if mask&bit != 0 {
			names = append(names, cmp.Or(throttleNames[bit], fmt.Sprintf("0x%x", bit)))
			mask &^= bit
		}
	}
	return names
}

// Info is what Inspect learns about this machine's GPUs.
type Info struct {
	Driver  string
	Devices []DeviceInfo
	// ClockOffsetNs estimates NVML's clock minus the system clock (see
	// Probe.ClockOffset); ClockOffsetOK is false when no sample was seen.
	ClockOffsetNs int64
	ClockOffsetOK bool
}

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Index int
	Name  string
	UUID  string
	// GPM is whether GpmQueryDeviceSupport says the device supports GPM.
	GPM bool
}

// Inspect initialises NVML (lib; nil: the system's), reads the driver
// version and each device's name and GPM support, estimates the clock
// offset from a few power-sample reads about 25 ms apart, and shuts NVML
// down. It returns a *NoNVMLError (wrapping probe.ErrNotSupported) when
// NVML is missing, and gives up when ctx ends.
func Inspect(ctx context.Context, lib nvml.Interface) (Info, error) {
	if lib == nil {
		lib = nvml.New() // the system's: dlopen of libnvidia-ml.so.1 at Init
	}
	if err := initLib(ctx, lib); err != nil {
		return Info{}, err
	}
	type result struct {
		info Info
		err  error
	}
	res, err := within(ctx, func() (res result) {
		defer lib.Shutdown()
		if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
			res.info.Driver = v
		}
		devs, infos, err := openDevices(lib, nil)
		if err != nil {
			return result{res.info, err}
		}
		res.info.Devices = infos
		var est offsetEstimate
		for i := 0; i < 4 && len(devs) > 0; i++ {
			if i > 0 {
				time.Sleep(25 * time.Millisecond)
			}
			_, ss, r := devs[0].GetSamples(nvml.TOTAL_POWER_SAMPLES, 0)
			after := time.Now()
			if r == nvml.SUCCESS && len(ss) > 0 {
				newest := slices.MaxFunc(ss, func(a, b nvml.Sample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
				est.observe(newest.TimeStamp, after)
			}
		}
		res.info.ClockOffsetNs, res.info.ClockOffsetOK = est.ns, est.ok
		return res
	}, nil)
	if err != nil {
		return Info{}, fmt.Errorf("gpu: inspecting devices: %w", err)
	}
	return res.info, res.err
}

// openDevices gets handles and descriptions of the GPUs at indices (nil or
// empty: all of them; an empty list never means "none").
func openDevices(lib library, indices []int) ([]device, []DeviceInfo, error) {
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("gpu: DeviceGetCount: %w", r)
	}
	if n == 0 {
		return nil, nil, fmt.Errorf("gpu: NVML sees no GPU: %w", probe.ErrNotSupported)
	}
	if len(indices) == 0 {
		indices = nil
		for i := 0; i < n; i++ {
			indices = append(indices, i)
		}
	}
	var (
		devs  []device
		infos []DeviceInfo
	)
	for _, i := range indices {
		if i < 0 || i >= n {
			return nil, nil, fmt.Errorf("gpu: GPU %d does not exist (NVML sees %d)", i, n)
		}
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, nil, fmt.Errorf("gpu: GPU %d: DeviceGetHandleByIndex: %w", i, r)
		}
		di := DeviceInfo{Index: i}
		di.Name, _ = d.GetName()
		di.UUID, _ = d.GetUUID()
		if s, r := d.GpmQueryDeviceSupport(); r == nvml.SUCCESS && s.IsSupportedDevice != 0 {
			di.GPM = true
		}
		devs = append(devs, d)
		infos = append(infos, di)
	}
	return devs, infos, nil
}

// offsetEstimate keeps the best estimate of NVML's clock minus the system
// clock. A sample read just now was taken at or before the read returned,
// so newest_ts - time_after_read is a lower bound of the offset, low by
// the newest sample's age; the maximum over many reads converges on the
// offset, within the sample cadence (~20 ms for power samples).
type offsetEstimate struct {
	ns int64
	ok bool
}

func (o *offsetEstimate) observe(newestUs uint64, after time.Time) {
	d := usToNs(newestUs) - after.UnixNano()
	if !o.ok || d > o.ns {
		o.ns, o.ok = d, true
	}
}
