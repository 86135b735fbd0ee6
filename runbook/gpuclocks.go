package runbook

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/asrprof/asrprof/probe"
)

// ClockLocker locks every GPU's graphics clock (asrprof sensitivity
// --gpu-clocks) and gives it back.
type ClockLocker interface {
	// Lock holds every GPU at mhz; an error wraps probe.ErrNotSupported
	// where NVML is missing or refuses (no permission, an unsupported GPU).
	Lock(mhz int) error
	// Reset gives every GPU its default clock behaviour back.
	Reset() error
}

// NVMLClocks locks clocks through lib (nil: the system's libnvidia-ml),
// with nvmlDeviceSetGpuLockedClocks(mhz, mhz) and
// nvmlDeviceResetGpuLockedClocks on every GPU.
func NVMLClocks(lib nvml.Interface) ClockLocker { return nvmlClocks{lib} }

type nvmlClocks struct{ lib nvml.Interface }

func (c nvmlClocks) each(what string, f func(d nvml.Device) nvml.Return) error {
	lib := c.lib
	if lib == nil {
		lib = nvml.New()
	}
	if r := lib.Init(); r != nvml.SUCCESS {
		return fmt.Errorf("no NVML (%s): %w", r.Error(), probe.ErrNotSupported)
	}
	defer lib.Shutdown()
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS || n == 0 {
		return fmt.Errorf("NVML sees no GPU: %w", probe.ErrNotSupported)
	}
	var errs []error
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return fmt.Errorf("NVML GPU %d: DeviceGetHandleByIndex: %s", i, r.Error())
		}
		switch r := f(d); r {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
			errs = append(errs, fmt.Errorf("NVML GPU %d: %s: %s: %w", i, what, r.Error(), probe.ErrNotSupported))
		default:
			errs = append(errs, fmt.Errorf("NVML GPU %d: %s: %s", i, what, r.Error()))
		}
	}
	return errors.Join(errs...)
}

func (c nvmlClocks) Lock(mhz int) error {
	return c.each(fmt.Sprintf("locking the graphics clock at %d MHz", mhz), func(d nvml.Device) nvml.Return {
		return d.SetGpuLockedClocks(uint32(mhz), uint32(mhz))
	})
}

func (c nvmlClocks) Reset() error {
	return c.each("resetting the locked clocks", func(d nvml.Device) nvml.Return { return d.ResetGpuLockedClocks() })
}
