package proctree

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Stat
		err  bool
	}{
		{
			name: "plain",
			in:   "6950 (cat) R 6947 6947 4777 0 -1 4194304 98 0 0 0 12 34 0 0 20 0 1 0 28005 3133440 387\n",
			want: Stat{PID: 6950, Comm: "cat", State: 'R', PPID: 6947, PGRP: 6947, Utime: 12, Stime: 34, Start: 28005, Processor: -1},
		},
		{
			name: "name with spaces and parens",
			in:   "42 (sglang::sch) (1)) S 1 42 42 0 -1 4194560 5 0 0 0 700 8 0 0 20 0 9 0 1 2 3",
			want: Stat{PID: 42, Comm: "sglang::sch) (1)", State: 'S', PPID: 1, PGRP: 42, Utime: 700, Stime: 8, Start: 1, Processor: -1},
		},
		{
			// fields 3-22, 23-37, then exit_signal (38) and processor (39)
			name: "start and processor",
			in:   "42 (a (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 1 0 987654 " + strings.Repeat("1 ", 15) + "17 3 0 0",
			want: Stat{PID: 42, Comm: "a (b) c", State: 'S', PPID: 1, PGRP: 42, Utime: 7, Stime: 3, Start: 987654, Processor: 3},
		},
		{name: "truncated", in: "1 (init) S 0 1", err: true},
		{name: "no name", in: "1 init S 0 1 1 0 -1 0 0 0 0 0 0 0", err: true},
		{name: "bad ppid", in: "1 (a) S x 1 1 0 -1 0 0 0 0 0 0 0 0 0", err: true},
		{name: "bad pgrp", in: "1 (a) S 0 y 1 0 -1 0 0 0 0 0 0 0 0 0", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			// The walk's fast ppid reader agrees where ParseStat reads one.
			if pp, ok := parsePPID([]byte(tt.in)); err == nil && (!ok || pp != tt.want.PPID) {
				t.Errorf("parsePPID = %d, %v; want %d", pp, ok, tt.want.PPID)
			} else if tt.name == "bad ppid" && ok {
				t.Errorf("parsePPID of a bad ppid = %d, want not ok", pp)
			}
		})
	}
}

// TestParseStatSelf reads this process's own start and core.
func TestParseStatSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	if st, err := ParseStat(string(b)); err != nil || st.Start == 0 || st.Processor < 0 {
		t.Errorf("ParseStat(/proc/self/stat) = %+v, %v", st, err)
	}
}

func TestDescendantsOf(t *testing.T) {
	parent := map[int]int{
		1:   0,
		10:  1,
		11:  10,
		12:  10,
		13:  12,
		20:  1,
		30:  30, // its own parent: ignored
		40:  41, // a cycle not reachable from 10
		41:  40,
		100: 13,
	}
	got := DescendantsOf(10, parent)
	want := []int{10, 11, 12, 13, 100}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DescendantsOf(10) = %v, want %v", got, want)
	}
	if got := DescendantsOf(40, parent); !reflect.DeepEqual(got, []int{40, 41}) {
		t.Errorf("DescendantsOf(40) = %v, want [40 41] (cycle tolerated)", got)
	}
	if got := DescendantsOf(99, parent); !reflect.DeepEqual(got, []int{99}) {
		t.Errorf("DescendantsOf(99) = %v, want [99]", got)
	}
}

const tcp4 = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1060 1 0000000073c5586e 100 0 0 10 0
   1: 020200C0:9408 507100CB:1F90 06 00000000:00000000 03:00001218 00000000     0        0 0 3 00000000055e7a50
   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 55501 1 0000000000000000 100 0 0 10 0
   3: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 55600 1 0000000000000000 20 4 30 10 -1
`

const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77001 1 0000000000000000 100 0 0 10 0
`

func TestParseListenInodes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		port int
		want []uint64
	}{
		{"v4 8080 listen only", tcp4, 8080, []uint64{55501}},
		{"v4 2024", tcp4, 2024, []uint64{1060}},
		{"v4 none", tcp4, 9, nil},
		{"v6 8080", tcp6, 8080, []uint64{77001}},
		{"empty", "", 8080, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseListenInodes(tt.in, tt.port)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := ParseListenInodes("h\n 0: 0100007F:ZZZZ 0:0 0A a b c d e 9\n", 1); err == nil {
		t.Error("bad port: want error")
	}
}

func TestParseSocketInode(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"socket:[55501]", 55501, true},
		{"pipe:[55501]", 0, false},
		{"socket:[x]", 0, false},
		{"socket:[12", 0, false},
		{"/dev/null", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseSocketInode(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseSocketInode(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLive(t *testing.T) {
	self := os.Getpid()
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		need.Dep(t, "sleep (coreutils), to start a child", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	d := Descendants(self)
	if len(d) == 0 || d[0] != self || !slices.Contains(d, cmd.Process.Pid) {
		t.Errorf("Descendants(self=%d) = %v, want self first and child %d", self, d, cmd.Process.Pid)
	}
	if d := Descendants(1 << 30); d != nil {
		t.Errorf("Descendants(missing) = %v, want nil", d)
	}
	th := Threads(self)
	if !slices.Contains(th, self) || len(th) < 2 {
		t.Errorf("Threads(self) = %v, want the main thread and the runtime's others", th)
	}
	if c := Comm(cmd.Process.Pid, cmd.Process.Pid); c != "sleep" {
		t.Errorf("Comm(child) = %q, want sleep", c)
	}
	if c := Comm(self, 1<<30); c != "" {
		t.Errorf("Comm(missing) = %q, want empty", c)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		need.Skip(t, "cannot listen on loopback: %v", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	pid, err := FindListener(port)
	if err != nil || pid != self {
		t.Errorf("FindListener(%d) = %d, %v; want %d", port, pid, err, self)
	}
	ln.Close()
	// Another process may listen on the freed port at once (it is in the
	// ephemeral range): then it is found, not us.
	if pid, err := FindListener(port); err == nil && pid == self || err != nil && !errors.Is(err, ErrNotFound) {
		t.Errorf("FindListener(closed port) = %d, %v; want ErrNotFound or another process", pid, err)
	}
}

func TestParseSchedstat(t *testing.T) {
	got, err := ParseSchedstat("173743399 14507423 416\n")
	if err != nil || got != (Schedstat{RunNs: 173743399, WaitNs: 14507423, Slices: 416}) {
		t.Errorf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"", "1 2", "1 x 3"} {
		if _, err := ParseSchedstat(bad); err == nil {
			t.Errorf("ParseSchedstat(%q): want error", bad)
		}
	}
}

func TestReadSmall(t *testing.T) {
	want, err := os.ReadFile("/proc/self/status")
	if err != nil {
		need.Skip(t, "no /proc: %v", err)
	}
	got, err := ReadSmall("/proc/self/status", make([]byte, 8192))
	if err != nil || len(got) < 100 || string(got[:5]) != string(want[:5]) {
		t.Errorf("ReadSmall = %q..., %v", got[:min(len(got), 20)], err)
	}
	if _, err := ReadSmall("/proc/self/status", make([]byte, 16)); err == nil {
		t.Error("ReadSmall into a short buffer: want error")
	}
	if _, err := ReadSmall("/proc/nonexistent", make([]byte, 16)); !os.IsNotExist(err) {
		t.Errorf("ReadSmall(missing) err = %v, want not-exist", err)
	}
}

// NamingPort finds a process by a port among its arguments, and not by a
// URL (a client's).
func TestNamingPort(t *testing.T) {
	start := func(args ...string) int {
		cmd := exec.Command("sh", append([]string{"-c", "sleep 30; :", "sh"}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	for _, args := range [][]string{{"--port=47311"}, {"--port", "47311"}, {"-p", "47311"}, {"--bind", "0.0.0.0:47311"}, {"--host=::", "--listen-addr=:47311"}} {
		server := start(args...)
		if pids, _ := NamingPort(47311); !slices.Contains(pids, server) {
			t.Errorf("%q: NamingPort(47311) = %v, want pid %d", args, pids, server)
		}
	}
	for _, args := range [][]string{{"http://127.0.0.1:47312/v1"}, {"--max-tokens", "47312"}, {"--max-tokens=47312"}, {"47312"}} {
		other := start(args...)
		if pids, _ := NamingPort(47312); slices.Contains(pids, other) {
			t.Errorf("%q: NamingPort(47312) = %v, named pid %d", args, pids, other)
		}
	}
}

// A killed child has exited while it is a zombie its parent has not
// reaped, not only once /proc forgets it; Alive still counts it.
func TestExited(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		need.Dep(t, "sleep (coreutils), to start a child", err)
	}
	pid := cmd.Process.Pid
	if Exited(pid) {
		t.Fatalf("Exited(running child %d) = true", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !Exited(pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Exited(killed, unreaped child %d) = false after 5 s", pid)
		}
	}
	if !Alive(pid) {
		t.Errorf("Alive(zombie %d) = false, want true (the zombie is still in /proc)", pid)
	}
	_ = cmd.Wait()
	if !Exited(pid) || !Exited(0) || !Exited(1<<30) {
		t.Errorf("Exited(reaped %d, 0, missing) = %v, %v, %v; want true", pid, Exited(pid), Exited(0), Exited(1<<30))
	}
	if Exited(os.Getpid()) {
		t.Error("Exited(self) = true")
	}
}
