package bpf

import (
	"time"

	"golang.org/x/sys/unix"
)

// MonoNow returns CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func MonoNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// ClockOffset returns unix ns − CLOCK_MONOTONIC ns (the offset that puts
// a BPF program's timestamps on the capture's wall clock), and the unix
// time it was taken at.
func ClockOffset() (off, unixNs int64) {
	m0 := MonoNow()
	u := time.Now().UnixNano()
	m1 := MonoNow()
	return u - int64(m0/2+m1/2), u
}
