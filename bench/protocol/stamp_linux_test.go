package protocol

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// firstByteStamp gives the byte's arrival, not when its reader ran: the
// reader here runs 300 ms after the server wrote, and the stamp is within
// 150 ms of the write. The byte is left unread.
func TestFirstByteStampIsTheKernels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wrote := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// the kernel turns stamping on a moment after the first socket
		// asks (a deferred static key): a packet before it has none
		time.Sleep(100 * time.Millisecond)
		wrote <- time.Now()
		c.Write([]byte("H"))
		time.Sleep(2 * time.Second)
	}()
	conn, err := newDialer().DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	at := <-wrote
	time.Sleep(300 * time.Millisecond)
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ns := firstByteStamp(rc)
	if ns == 0 {
		t.Fatal("no kernel stamp (SO_TIMESTAMPNS)")
	}
	if d := time.Unix(0, ns).Sub(at); d < 0 || d > 150*time.Millisecond {
		t.Errorf("stamp %v after the write, want within 150 ms (the reader ran 300 ms late)", d)
	}
	var b [1]byte
	if n, err := conn.Read(b[:]); n != 1 || b[0] != 'H' {
		t.Errorf("after the stamp, read %q, %v; want the byte still there", b[:n], err)
	}
}
