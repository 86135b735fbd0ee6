package protocol

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// lowatControl sets TCP_NOTSENT_LOWAT on a TCP socket before it connects
// (newDialer). A kernel without it leaves the socket as it was.
func lowatControl(network, _ string, c syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	return c.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, sendLowat)
	})
}
