// Package bpf holds what the eBPF probes (probe/sched, probe/cuda,
// probe/cpu's sampler) share about talking to the kernel: telling "not
// allowed here" from "failed" (NotSupported), and reading the names the
// BPF programs copy from task_struct (Comm).
package bpf

import (
	"errors"
	"fmt"

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
