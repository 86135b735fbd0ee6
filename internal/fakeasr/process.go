// The fake ASR server as a separate process, for tests of server
// lifecycles: the test binary re-executes itself with Command's arguments,
// and Main (called first thing in TestMain) turns that process into the
// server: the same server as NewServer's, of a Config made from
// ProcessOptions, that can also misbehave at start-up (see ProcessMode).

package fakeasr

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/proctree"
)

// ProcessMode is how the fake server behaves.
type ProcessMode string

const (
	// ProcessOK serves normally.
	ProcessOK ProcessMode = "ok"
	// ProcessExit writes a few log lines and exits with status 3 before listening.
	ProcessExit ProcessMode = "exit"
	// ProcessUnhealthy listens, but /health answers 503 forever.
	ProcessUnhealthy ProcessMode = "unhealthy"
	// ProcessChild starts a child process in its group that ignores SIGTERM and
	// writes the child's pid to ProcessOptions.ChildPIDFile, then serves.
	ProcessChild ProcessMode = "child"
)

// ProcessOptions configure one fake server.
type ProcessOptions struct {
	Port int
	Mode ProcessMode
	// CounterFile counts server starts (one line per start); with
	// FailStart = n, the n-th start answers its first transcription
	// request with HTTP 500.
	CounterFile string
	FailStart   int
	// ChildPIDFile receives the child's pid in Child mode.
	ChildPIDFile string
	// Delay, Spin and MaxRunning are Config's Delay, Spin and Capacity
	// (MaxRunning: the reference server's --max-running-requests, under
	// the same flag name).
	Delay, Spin time.Duration
	MaxRunning  int
	APIKey      string // Config's (the flag --api-key, vLLM's name)
}

const marker = "-fakeasr-fake-server"

// Command returns the argv of a fake server: this test binary, re-executed.
func Command(o ProcessOptions) []string {
	argv := []string{os.Args[0], marker,
		"-port", strconv.Itoa(o.Port), "-mode", string(o.Mode),
		"-counter", o.CounterFile, "-fail-start", strconv.Itoa(o.FailStart),
		"-child-pid", o.ChildPIDFile, "-delay", o.Delay.String()}
	if o.Spin > 0 {
		argv = append(argv, "-spin", o.Spin.String())
	}
	if o.MaxRunning > 0 {
		argv = append(argv, "--max-running-requests", strconv.Itoa(o.MaxRunning))
	}
	if o.APIKey != "" {
		argv = append(argv, "--api-key", o.APIKey)
	}
	return argv
}

// CommandLine is Command joined into one --server-cmd string (the paths
// must hold no blanks or quotes; test temp dirs do not).
func CommandLine(o ProcessOptions) string {
	argv := Command(o)
	for i, a := range argv {
		if a == "" {
			argv[i] = "''"
		}
	}
	return strings.Join(argv, " ")
}

// FreePort returns a loopback port reserved for the test until it ends.
// The port lies below the kernel's ephemeral range, so no listener on port
// 0 and no outgoing connection of a parallel test can be handed it before
// the test's own server binds it (a port taken that way once failed CI), and
// a lock on its byte of one file keeps other test processes of this user
// off it.
func FreePort(t testing.TB) int {
	t.Helper()
	hi := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
				hi = n
			}
		}
	}
	locks := filepath.Join(os.TempDir(), fmt.Sprintf("asrprof-test-ports-%d.lock", os.Getuid()))
	for range 1000 {
		port := 10000 + rand.IntN(hi-10000)
		f, err := os.OpenFile(locks, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		// an open file description's lock: held until f is closed, and
		// refused to any other open of the file, in this process too
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(port), Len: 1}
		if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) != nil {
			f.Close()
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		t.Cleanup(func() { f.Close() })
		return port
	}
	t.Fatalf("no free loopback port in 10000-%d", hi)
	return 0
}

// Main turns this process into a fake server when it was started by
// Command, and never returns then; otherwise it returns at once. Call it
// first in TestMain.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != marker {
		return
	}
	var o ProcessOptions
	fs := flag.NewFlagSet("fake-server", flag.ExitOnError)
	fs.IntVar(&o.Port, "port", 0, "")
	mode := fs.String("mode", string(ProcessOK), "")
	fs.StringVar(&o.CounterFile, "counter", "", "")
	fs.IntVar(&o.FailStart, "fail-start", 0, "")
	fs.StringVar(&o.ChildPIDFile, "child-pid", "", "")
	fs.DurationVar(&o.Delay, "delay", 0, "")
	fs.DurationVar(&o.Spin, "spin", 0, "")
	fs.IntVar(&o.MaxRunning, "max-running-requests", 0, "")
	fs.StringVar(&o.APIKey, "api-key", "", "")
	_ = fs.Parse(os.Args[2:])
	o.Mode = ProcessMode(*mode)
	if err := serve(o); err != nil {
		fmt.Fprintln(os.Stderr, "fake server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(o ProcessOptions) error {
	fmt.Printf("fake server pid %d starting (mode %s)\n", os.Getpid(), o.Mode)
	if o.APIKey != "" {
		fmt.Printf("non-default args: {'api_key': [%q]}\n", o.APIKey) // as vLLM logs its arguments
	}
	if o.Mode == ProcessExit {
		fmt.Fprintln(os.Stderr, "loading model weights")
		fmt.Fprintln(os.Stderr, "fatal: CUDA out of memory (fake)")
		time.Sleep(100 * time.Millisecond)
		os.Exit(3)
	}
	start := 0
	if o.CounterFile != "" {
		f, err := os.OpenFile(o.CounterFile, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(f)
		start = strings.Count(string(b), "\n") + 1
		fmt.Fprintln(f, os.Getpid())
		f.Close()
	}
	if o.Mode == ProcessChild {
		// The child ignores SIGTERM (the disposition survives exec), so
		// only the SIGKILL to the group ends it.
		c := exec.Command("/bin/sh", "-c", `trap "" TERM; exec sleep 300`)
		if err := c.Start(); err != nil {
			return err
		}
		if err := os.WriteFile(o.ChildPIDFile, []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
			return err
		}
		fmt.Printf("child pid %d\n", c.Process.Pid)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)))
	if err != nil {
		return err
	}
	fmt.Printf("listening on http://%s\n", l.Addr())
	cfg := Config{Delay: o.Delay, Spin: o.Spin, Capacity: o.MaxRunning, APIKey: o.APIKey, Unhealthy: o.Mode == ProcessUnhealthy}
	if o.FailStart > 0 && start == o.FailStart {
		cfg.Fail = FailOn(map[int]Failure{1: Status(http.StatusInternalServerError)})
	}
	_, h := newServer(cfg)
	return http.Serve(l, h)
}

// spinJobs feed the one worker thread of Spin, started by the first.
var spinJobs = make(chan spinJob)

type spinJob struct {
	d    time.Duration
	done chan struct{}
}

var startSpinWorker = sync.OnceFunc(func() {
	go func() {
		runtime.LockOSThread()
		for j := range spinJobs {
			var ts unix.Timespec
			cpu := func() time.Duration {
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
				return time.Duration(ts.Nano())
			}
			for end := cpu() + j.d; cpu() < end; {
			}
			close(j.done)
		}
	}()
})

// spin busy-loops d of the worker thread's CPU time (fixed work: it takes
// longer when the thread gets less of its CPU).
func spin(d time.Duration) {
	startSpinWorker()
	done := make(chan struct{})
	spinJobs <- spinJob{d, done}
	<-done
}

// Gone reports whether pid no longer runs (missing, or a zombie that no
// one reaped).
func Gone(pid int) bool {
	_, live := proctree.LiveStat("/proc", pid)
	return !live
}

// Kill ends pid, for test cleanups after a failure.
func Kill(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }
