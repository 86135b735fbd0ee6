// Package bpf holds what the eBPF probes (probe/sched, probe/cuda,
// probe/cpu's sampler) share about talking to the kernel: telling "not
// allowed here" from "failed" (NotSupported), and reading the names the
// BPF programs copy from task_struct (Comm), and switching on the
// kernel's BPF run-time statistics (EnableRunTimeStats).
package bpf

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/probe"
)

// NotSupported wraps err with probe.ErrNotSupported when it says that the
// kernel or our permissions do not allow it: EPERM, EACCES,
// ebpf.ErrNotSupported, or any of also (errors that mean the same for one
// probe's calls, such as ENOENT from perf_event_open). Otherwise it
// returns err as it is. The wrapped error still matches err with
// errors.Is.
func NotSupported(err error, also ...error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: %w", probe.ErrNotSupported, err)
	}
	for _, a := range also {
		if errors.Is(err, a) {
			return fmt.Errorf("%w: %w", probe.ErrNotSupported, err)
		}
	}
	return err
}

// Comm returns the NUL-terminated name in b, a char[16] comm field as
// bpf2go renders it.
func Comm(b []int8) string {
	buf := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		buf = append(buf, byte(c))
	}
	return string(buf)
}

// EnableRunTimeStats turns on the kernel's BPF run-time statistics (the
// run_time_ns of every program; the kernel then times each run, tens of
// nanoseconds more a run) until the returned closer is closed. It needs
// CAP_SYS_ADMIN; without it the error wraps probe.ErrNotSupported.
func EnableRunTimeStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, NotSupported(fmt.Errorf("enabling BPF run-time statistics: %w", err))
	}
	return c, nil
}
