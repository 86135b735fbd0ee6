package proctree

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned by FindListener when no process listens on the port.
var ErrNotFound = errors.New("no listener found")

// UserHZ is the unit of the CPU times and start times in /proc stat files
// (USER_HZ, 100 on every architecture Linux ships).
const UserHZ = 100

// Stat is the part of /proc/PID/stat (or /proc/PID/task/TID/stat) that
// probes use.
type Stat struct {
	PID   int    // field 1: the pid (a tid when read from task/)
	Comm  string // field 2, without the parentheses
	State byte   // field 3: R, S, D, Z, ...
	PPID  int    // field 4: the parent's tgid
	PGRP  int    // field 5: the process group
	Utime uint64 // field 14, clock ticks (USER_HZ)
	Stime uint64 // field 15, clock ticks (USER_HZ)
	Start uint64 // field 22: when it started, clock ticks (USER_HZ) since boot; 0 unread
	// Processor is field 39: the core it last ran on; -1 unread.
	Processor int
}

// ParseStat parses the text of a /proc stat file. The command name may
// contain spaces and parentheses, so it is taken up to the last ')'.
func ParseStat(s string) (Stat, error) {
	open := strings.IndexByte(s, '(')
	closing := strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("parsing stat %q: no command name", trim(s))
	}
	var st Stat
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("parsing stat pid: %w", err)
	}
	st.PID = pid
	st.Comm = s[open+1 : closing]
	// rest[0] is field 3 (state).
	rest := strings.Fields(s[closing+1:])
	if len(rest) < 13 {
		return Stat{}, fmt.Errorf("parsing stat of %d: %d fields after the name, want at least 13", pid, len(rest))
	}
	if len(rest[0]) != 1 {
		return Stat{}, fmt.Errorf("parsing stat of %d: bad state %q", pid, rest[0])
	}
	st.State = rest[0][0]
	var errs [4]error
	st.PPID, errs[0] = strconv.Atoi(rest[1])
	st.PGRP, errs[1] = strconv.Atoi(rest[2])
	st.Utime, errs[2] = strconv.ParseUint(rest[11], 10, 64)
	st.Stime, errs[3] = strconv.ParseUint(rest[12], 10, 64)
	for i, field := range []string{"ppid", "pgrp", "utime", "stime"} {
		if errs[i] != nil {
			return Stat{}, fmt.Errorf("parsing stat of %d: %s: %w", pid, field, errs[i])
		}
	}
	st.Processor = -1
	if len(rest) > 19 {
		st.Start, _ = strconv.ParseUint(rest[19], 10, 64)
	}
	if len(rest) > 36 {
		if n, err := strconv.Atoi(rest[36]); err == nil {
			st.Processor = n
		}
	}
	return st, nil
}

func trim(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// DescendantsOf returns root followed by every pid whose chain of parents
// (parent maps a pid to its parent pid) leads to root, in breadth-first
// order, children sorted by pid. It tolerates cycles.
func DescendantsOf(root int, parent map[int]int) []int {
	children := make(map[int][]int)
	for pid, pp := range parent {
		if pid != pp {
			children[pp] = append(children[pp], pid)
		}
	}
	out := []int{root}
	seen := map[int]bool{root: true}
	for i := 0; i < len(out); i++ {
		kids := children[out[i]]
		sort.Ints(kids)
		for _, k := range kids {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// Descendants returns pid and all its live descendant processes (by the
// ppid field of /proc/*/stat). It returns nil when pid does not exist.
// Processes that exit while it reads are skipped.
func Descendants(pid int) []int {
	if !Alive(pid) {
		return nil
	}
	return DescendantsOf(pid, Parents())
}

// Alive reports whether /proc has pid (a zombie counts).
func Alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return pid > 0 && err == nil
}

// Exited reports whether pid has exited: /proc no longer shows it, or it
// is a zombie (or dead) that its parent has not reaped yet. A killed
// server whose sockets have closed stays a zombie until its parent waits
// for it, which a loaded parent may do seconds later.
func Exited(pid int) bool {
	if pid <= 0 {
		return true
	}
	b, err := ReadSmall("/proc/"+strconv.Itoa(pid)+"/stat", make([]byte, 1024))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// Parents maps every live process to its parent, from /proc/*/stat: one
// open and read per process on the machine, the cost of Descendants.
func Parents() map[int]int {
	parent := make(map[int]int)
	buf := make([]byte, 4096)
	for _, p := range pids("/proc") {
		b, err := ReadSmall("/proc/"+strconv.Itoa(p)+"/stat", buf)
		if err != nil {
			continue
		}
		if pp, ok := parsePPID(b); ok {
			parent[p] = pp
		}
	}
	return parent
}

// parsePPID reads field 4 of a stat line: after the last ')' come the
// state and the ppid.
func parsePPID(b []byte) (int, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || len(b) < i+5 || b[i+1] != ' ' || b[i+3] != ' ' {
		return 0, false
	}
	n, ok := 0, false
	for _, c := range b[i+4:] {
		if c < '0' || c > '9' {
			break
		}
		n, ok = n*10+int(c-'0'), true
	}
	return n, ok
}

// ReadSmall reads a small file (a /proc file of a few KiB) into buf and
// returns the part read, without the runtime poller's extra system calls
// that os.ReadFile makes. A file longer than buf is an error.
func ReadSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			return nil, fmt.Errorf("reading %s: longer than %d bytes", path, len(buf))
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}

// pids lists the numeric entries of dir, sorted.
func pids(dir string) []int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// Threads returns the tids of pid's threads, sorted; nil when pid does not
// exist.
func Threads(pid int) []int {
	return pids(filepath.Join("/proc", strconv.Itoa(pid), "task"))
}

// Comm returns the name of thread tid of process pid (at most 15 bytes, as
// set by prctl(PR_SET_NAME)), or "" when the thread is gone.
func Comm(pid, tid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n")
}

// NamingPort returns the processes (but this one) whose command line names
// port as a listening address ("--port 8000", "-p 8000", "--port=8000",
// "--bind 0.0.0.0:8000"; not "--max-tokens 8000", nor a URL, which clients
// name), sorted, with their command lines: the likely server where the
// listener's owner cannot be seen.
func NamingPort(port int) (found []int, cmdlines []string) {
	p := strconv.Itoa(port)
	listenFlag := func(f string) bool {
		f = strings.ToLower(f)
		return f == "-p" || strings.HasPrefix(f, "-") && (strings.Contains(f, "port") || strings.Contains(f, "listen") || strings.Contains(f, "bind") || strings.Contains(f, "addr"))
	}
	for _, pid := range pids("/proc") {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		for i, a := range args {
			k, v, kv := strings.Cut(a, "=")
			if !kv {
				k, v = "", a
			}
			if strings.Contains(v, "://") || v != p && !strings.HasSuffix(v, ":"+p) {
				continue
			}
			if strings.HasSuffix(v, ":"+p) || kv && listenFlag(k) || !kv && i > 0 && listenFlag(args[i-1]) {
				found, cmdlines = append(found, pid), append(cmdlines, strings.Join(args, " "))
				break
			}
		}
	}
	return found, cmdlines
}

// PortHint is the sentence that names the processes NamingPort finds for
// port ("" when none): where a listener's owner cannot be seen, the pid to
// give.
func PortHint(port int) string {
	pids, cmds := NamingPort(port)
	if len(pids) == 0 {
		return ""
	}
	h := fmt.Sprintf("the command line of pid %d names the port: %.120s", pids[0], cmds[0])
	if len(pids) > 1 {
		h += fmt.Sprintf(" (and %d more: %v)", len(pids)-1, pids[1:min(len(pids), 6)])
	}
	return h
}

// tcpListen is the st column's value for a listening socket.
const tcpListen = "0A"

// ParseListenInodes returns the socket inodes of the LISTEN sockets on port
// in the text of /proc/net/tcp or /proc/net/tcp6.
func ParseListenInodes(s string, port int) ([]uint64, error) {
	var out []uint64
	for i, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 {
			continue // header or blank
		}
		local, st := f[1], f[3]
		if st != tcpListen {
			continue
		}
		colon := strings.LastIndexByte(local, ':')
		if colon < 0 {
			return nil, fmt.Errorf("parsing tcp table line %d: bad local address %q", i+1, local)
		}
		p, err := strconv.ParseUint(local[colon+1:], 16, 16)
		if err != nil {
			return nil, fmt.Errorf("parsing tcp table line %d: port: %w", i+1, err)
		}
		if int(p) != port {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing tcp table line %d: inode: %w", i+1, err)
		}
		if ino != 0 {
			out = append(out, ino)
		}
	}
	return out, nil
}

// ParseSocketInode returns the inode of a /proc/PID/fd link target of the
// form "socket:[12345]".
func ParseSocketInode(link string) (uint64, bool) {
	rest, ok := strings.CutPrefix(link, "socket:[")
	rest, closed := strings.CutSuffix(rest, "]")
	if !ok || !closed {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// FindListener returns the pid of the process that owns a listening TCP
// socket (IPv4 or IPv6) on port, in this network namespace. When several
// processes share the socket (a forking server) it returns the lowest pid,
// normally the parent. It returns an error wrapping ErrNotFound when no
// process is found.
func FindListener(port int) (int, error) {
	inodes := make(map[uint64]bool)
	var readErr error
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			readErr = err
			continue
		}
		ino, err := ParseListenInodes(string(b), port)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		for _, i := range ino {
			inodes[i] = true
		}
	}
	if len(inodes) == 0 {
		if readErr != nil {
			return 0, fmt.Errorf("port %d: %w (%w)", port, ErrNotFound, readErr)
		}
		return 0, fmt.Errorf("port %d: %w", port, ErrNotFound)
	}
	for _, pid := range pids("/proc") {
		fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		ents, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, e := range ents {
			link, err := os.Readlink(filepath.Join(fdDir, e.Name()))
			if err != nil {
				continue
			}
			if ino, ok := ParseSocketInode(link); ok && inodes[ino] {
				return pid, nil
			}
		}
	}
	// Another user's process: its fd links are not ours to read.
	return 0, fmt.Errorf("port %d: %w that this user may look into (the socket is another user's process)", port, ErrNotFound)
}

// StatusField returns the value of the "key:" line in the text of a
// /proc status file, trimmed.
func StatusField(status, key string) (string, bool) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// Mapping is one executable line of /proc/PID/maps.
type Mapping struct {
	Start, Limit, Offset uint64
	Dev                  string
	Inode                uint64
	Path                 string
}

// ParseMaps returns the executable mappings in the text of
// /proc/PID/maps, in address order. Anonymous mappings and pseudo-files
// such as [vdso] are kept with their bracketed name and inode 0.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		// start-limit perms offset dev inode [path]
		f := strings.Fields(sc.Text())
		if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return out, fmt.Errorf("maps line %q: no address range", sc.Text())
		}
		m := Mapping{Dev: f[3]}
		var errs [4]error
		m.Start, errs[0] = strconv.ParseUint(lo, 16, 64)
		m.Limit, errs[1] = strconv.ParseUint(hi, 16, 64)
		m.Offset, errs[2] = strconv.ParseUint(f[2], 16, 64)
		m.Inode, errs[3] = strconv.ParseUint(f[4], 10, 64)
		if err := cmp.Or(errs[:]...); err != nil {
			return out, fmt.Errorf("maps line %q: %w", sc.Text(), err)
		}
		if len(f) >= 6 {
			// Paths may hold spaces; " (deleted)" stays part of the name.
			m.Path = strings.Join(f[5:], " ")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Schedstat is /proc/PID/task/TID/schedstat: the kernel's own run-time
// accounting of one thread, in nanoseconds. It reads zeros on kernels whose
// schedstats/sched_info are off.
type Schedstat struct {
	RunNs  uint64 // time on a CPU
	WaitNs uint64 // time runnable, waiting on a run queue
	Slices uint64 // number of times it ran
}

// ParseSchedstat parses the text of a schedstat file ("run wait slices").
func ParseSchedstat(s string) (Schedstat, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return Schedstat{}, fmt.Errorf("parsing schedstat %q: want 3 fields", trim(s))
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return Schedstat{}, fmt.Errorf("parsing schedstat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	return Schedstat{RunNs: v[0], WaitNs: v[1], Slices: v[2]}, nil
}

// ReadSchedstat reads the schedstat of thread tid of process pid.
func ReadSchedstat(pid, tid int) (Schedstat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "schedstat"))
	if err != nil {
		return Schedstat{}, err
	}
	return ParseSchedstat(string(b))
}
