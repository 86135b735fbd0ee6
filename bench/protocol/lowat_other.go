//go:build !linux

package protocol

import "syscall"

// lowatControl does nothing where TCP_NOTSENT_LOWAT is not set.
func lowatControl(string, string, syscall.RawConn) error { return nil }

// firstByteStamp gives no kernel stamp here: the caller's clock stands.
func firstByteStamp(syscall.RawConn) int64 { return 0 }
