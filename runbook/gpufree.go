package runbook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/asrprof/asrprof/probe"
)

// GPU is one device's identity and memory use.
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	UsedMiB  uint64 `json:"used_mib"`
	TotalMiB uint64 `json:"total_mib"`
}

// GPUReader reads every GPU's memory use.
type GPUReader interface {
	// GPUs returns one entry per GPU. It returns an error wrapping
	// probe.ErrNotSupported where there is no NVML (no driver, no GPU),
	// and ctx's error when a call does not return in time. Safe for
	// concurrent use.
	GPUs(ctx context.Context) ([]GPU, error)
}

// NVML returns a GPUReader over lib (nil: the system's libnvidia-ml).
func NVML(lib nvml.Interface) GPUReader { return nvmlReader{lib} }

type nvmlReader struct{ lib nvml.Interface }

func (r nvmlReader) GPUs(ctx context.Context) ([]GPU, error) {
	var gpus []GPU
	var err error
	done := make(chan struct{})
	go func() { // NVML calls cannot be cancelled
		defer close(done)
		err = eachGPU(r.lib, func(i int, d nvml.Device) error {
			m, r := d.GetMemoryInfo()
			if r != nvml.SUCCESS {
				return fmt.Errorf("NVML GPU %d: GetMemoryInfo: %s", i, r.Error())
			}
			g := GPU{Index: i, UsedMiB: m.Used >> 20, TotalMiB: m.Total >> 20}
			g.Name, _ = d.GetName()
			g.UUID, _ = d.GetUUID()
			gpus = append(gpus, g)
			return nil
		})
	}()
	select {
	case <-done:
		if err != nil {
			return nil, err
		}
		return gpus, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("reading GPU memory: NVML did not answer: %w", ctx.Err())
	}
}

// eachGPU calls f with every GPU's handle that lib (nil: the system's
// libnvidia-ml) sees, in index order, and stops at f's first error. No
// NVML, or no GPU, is an error wrapping probe.ErrNotSupported.
func eachGPU(lib nvml.Interface, f func(i int, d nvml.Device) error) error {
	if lib == nil {
		lib = nvml.New()
	}
	if r := lib.Init(); r != nvml.SUCCESS {
		return fmt.Errorf("no NVML (%s): %w", r.Error(), probe.ErrNotSupported)
	}
	defer lib.Shutdown()
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return fmt.Errorf("NVML DeviceGetCount: %s", r.Error())
	}
	if n == 0 {
		return fmt.Errorf("NVML sees no GPU: %w", probe.ErrNotSupported)
	}
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return fmt.Errorf("NVML GPU %d: DeviceGetHandleByIndex: %s", i, r.Error())
		}
		if err := f(i, d); err != nil {
			return err
		}
	}
	return nil
}

// WaitGPUFree polls r until every GPU uses less than limitMiB, for at most
// timeout. It returns the last reading. Where there is no NVML it returns
// at once with an error wrapping probe.ErrNotSupported (callers skip the
// check); memory still in use at the timeout is ErrGPUBusy.
func WaitGPUFree(ctx context.Context, r GPUReader, limitMiB uint64, timeout, every time.Duration) ([]GPU, error) {
	deadline := time.Now().Add(timeout)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		gpus, err := r.GPUs(callCtx)
		cancel()
		if err != nil {
			return nil, err
		}
		var busy []string
		for _, g := range gpus {
			if g.UsedMiB >= limitMiB {
				busy = append(busy, fmt.Sprintf("GPU %d uses %d MiB", g.Index, g.UsedMiB))
			}
		}
		if len(busy) == 0 {
			return gpus, nil
		}
		if !time.Now().Before(deadline) {
			return gpus, fmt.Errorf("%w: after %s, %s (limit %d MiB); a process outside the server's group may hold it (nvidia-smi lists them)",
				ErrGPUBusy, timeout, strings.Join(busy, ", "), limitMiB)
		}
		select {
		case <-ctx.Done():
			return gpus, ctx.Err()
		case <-time.After(min(every, time.Until(deadline)+time.Millisecond)):
		}
	}
}

// isNotSupported reports whether err says the check cannot run here.
func isNotSupported(err error) bool { return errors.Is(err, probe.ErrNotSupported) }

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

// each calls f on every GPU (eachGPU), all of them whatever it answers:
// the errors are joined, each wrapping probe.ErrNotSupported where NVML
// refuses (no permission, an unsupported GPU).
func (c nvmlClocks) each(what string, f func(d nvml.Device) nvml.Return) error {
	var errs []error
	if err := eachGPU(c.lib, func(i int, d nvml.Device) error {
		switch r := f(d); r {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
			errs = append(errs, fmt.Errorf("NVML GPU %d: %s: %s: %w", i, what, r.Error(), probe.ErrNotSupported))
		default:
			errs = append(errs, fmt.Errorf("NVML GPU %d: %s: %s", i, what, r.Error()))
		}
		return nil
	}); err != nil {
		return err
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
