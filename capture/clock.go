package capture

import (
	"time"

	"golang.org/x/sys/unix"
)

// monoMinusWall returns CLOCK_MONOTONIC minus CLOCK_REALTIME in ns, the
// offset that converts monotonic (and BPF) timestamps to wall time.
func monoMinusWall() int64 {
	var mono unix.Timespec
	wall := time.Now().UnixNano()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0
	}
	return mono.Nano() - wall
}
