package probetest

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setThreadName names the calling OS thread (at most 15 bytes).
func setThreadName(name string) error {
	b := append([]byte(name), 0)
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NAME, %q): %w", name, err)
	}
	return nil
}

// runWorkload starts the busy and sleeping threads, writes their tids to
// out and returns when in reaches EOF (the parent went away) or after a
// minute.
func runWorkload(in io.Reader, out io.Writer) error {
	type started struct {
		tid int
		err error
	}
	busy := make(chan started, 1)
	sleep := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		err := setThreadName(BusyName)
		busy <- started{unix.Gettid(), err}
		x := uint64(1)
		for {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}()
	go func() {
		runtime.LockOSThread()
		err := setThreadName(SleepName)
		sleep <- started{unix.Gettid(), err}
		ts := unix.NsecToTimespec(int64(SleepInterval))
		for {
			_ = unix.Nanosleep(&ts, nil)
		}
	}()
	b, s := <-busy, <-sleep
	if err := cmp.Or(b.err, s.err); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "busy=%d sleep=%d\n", b.tid, s.tid); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
	return nil
}
