//go:build !linux

package protocol

import "syscall"

// lowatControl does nothing where TCP_NOTSENT_LOWAT is not set.
func lowatControl(string, string, syscall.RawConn) error { return nil }
