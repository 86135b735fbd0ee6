package protocol

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lowatControl sets, on a TCP socket before it connects (newDialer),
// TCP_NOTSENT_LOWAT, and SO_TIMESTAMPNS for firstByteStamp. A kernel
// without either leaves the socket as it was.
func lowatControl(network, _ string, c syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	return c.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, sendLowat)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
}

// firstByteStamp waits until rc has a byte to read and returns when the
// kernel received it (unix ns; SO_TIMESTAMPNS, set at dial), leaving the
// byte unread (MSG_PEEK). The stamp is the packet's arrival, not when
// this goroutine ran: on a busy host a reader runs milliseconds late
// (docs/BUNDLE.md, first_byte_unix_ns). 0 when the kernel gave no stamp,
// or the read failed (the caller's read then says why).
func firstByteStamp(rc syscall.RawConn) int64 {
	var b [1]byte
	var oob [64]byte
	var ns int64
	_ = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, err := unix.Recvmsg(int(fd), b[:], oob[:], unix.MSG_PEEK)
		for err == unix.EINTR {
			n, oobn, _, _, err = unix.Recvmsg(int(fd), b[:], oob[:], unix.MSG_PEEK)
		}
		if err == unix.EAGAIN || err == unix.EWOULDBLOCK {
			return false // wait for it (until a deadline, too)
		}
		if err != nil || n == 0 {
			return true
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
				ns = (*unix.Timespec)(unsafe.Pointer(&m.Data[0])).Nano()
			}
		}
		return true
	})
	return ns
}
