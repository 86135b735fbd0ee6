// Package guard stops a process group that asrprof started when asrprof
// ends without stopping it (SIGKILL, the OOM killer, a crash): a server
// (runbook), which otherwise kept its port and GPU and left its key in
// server.log, or the benchmark command of `capture --proxy`, which
// otherwise kept sending to a proxy that was gone.
//
// The guard is this executable re-executed with Env set, in a process
// group of its own (a Ctrl-C at the terminal reaches asrprof, not it); the
// init below turns that process into the guard before anything else of
// the program runs. Its name is Name, in ps and in /proc/PID/comm, so that
// a kill by name (`pkill -9 asrprof`, `killall -9 asrprof`, `pkill -9 -f
// asrprof`) ends asrprof and leaves the guard to stop the group. Its stdin
// is a pipe that only asrprof holds: a first line with what to guard, then
// the byte done once asrprof has stopped the group itself. End of file
// before that byte means asrprof is gone: the guard stops the group as
// asrprof would (proctree.StopGroup), hides the credentials in the log,
// and says so.
package guard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/internal/secret"
)

// Exe is the guard's executable: this one (a test makes it fail).
var Exe = os.Executable

// Env, when set, makes this process a guard.
const Env = "ASRPROF_GUARD"

// Name is the guard's process name: not "asrprof", nor holding it.
const Name = "asr-guard"

const done = 'x'

// Spec is what a guard stops. The secrets go through the pipe, not the
// environment or argv, which other users may read.
type Spec struct {
	PID  int    `json:"pid"`  // the group's leader
	What string `json:"what"` // "server", "benchmark command": for ps and the line
	// Log, when set, is the group's log: its credentials are hidden and
	// the guard's line is appended to it; else the line goes to stderr.
	Log     string        `json:"log,omitempty"`
	Grace   time.Duration `json:"grace_ns"`
	Secrets []string      `json:"secrets,omitempty"`
	Owner   int           `json:"owner"` // asrprof's pid, for the line
}

func init() {
	if os.Getenv(Env) != "" {
		_ = os.WriteFile("/proc/self/comm", []byte(Name), 0) // the name kills match; argv is set by Start
		os.Exit(Main(os.Stdin, os.Stderr))
	}
}

// Main waits on in; when it ends before done it stops the group, scrubs
// its log and writes its line. It returns the exit status.
func Main(in io.Reader, stderr io.Writer) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	r := bufio.NewReader(in)
	line, err := r.ReadBytes('\n')
	var g Spec
	if err == nil {
		err = json.Unmarshal(line, &g)
	}
	if err != nil || g.PID <= 0 {
		fmt.Fprintf(stderr, "asrprof guard: bad spec %q: %v\n", line, err)
		return 2
	}
	if b, err := r.ReadByte(); err == nil && b == done {
		return 0
	}
	exited := func() bool { _, live := proctree.LiveStat("/proc", g.PID); return !live } // not our child
	if exited() && len(proctree.GroupMembers("/proc", g.PID)) == 0 {
		return 0 // the group had ended: nothing to stop, nothing to say
	}
	err = proctree.StopGroup(context.Background(), g.PID, g.Grace, exited)
	what := "stopped"
	if err != nil {
		what = err.Error()
	}
	msg := fmt.Sprintf("asrprof (pid %d) ended without stopping this %s (pid %d); its guard stopped it: %s\n", g.Owner, g.What, g.PID, what)
	if g.Log == "" {
		fmt.Fprint(stderr, msg)
		return 0
	}
	secret.ScrubFile(g.Log, g.Secrets)
	if f, ferr := os.OpenFile(g.Log, os.O_WRONLY|os.O_APPEND, 0); ferr == nil {
		fmt.Fprint(f, msg)
		f.Close()
	}
	return 0
}

// A Guard is a started guard; Release tells it that asrprof stopped the
// group itself.
type Guard struct{ w io.WriteCloser }

// Start starts the guard of spec.PID's group. On an error the group runs
// unguarded, as before there were guards: the caller says so.
func Start(spec Spec) (*Guard, error) {
	exe, err := Exe()
	if err != nil {
		return nil, err
	}
	spec.Owner = os.Getpid()
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{Name, fmt.Sprintf("(of %s pid %d)", spec.What, spec.PID)} // what ps shows; the env decides
	cmd.Env = append(os.Environ(), Env+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.Log == "" {
		cmd.Stderr = os.Stderr // where its line goes
	}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	go cmd.Wait() // reaped when it ends; it outlives asrprof only when asrprof dies first
	if _, err := w.Write(append(b, '\n')); err != nil {
		w.Close()
		return nil, err
	}
	return &Guard{w}, nil
}

// Release tells the guard that the group was stopped (or ended) under
// asrprof's eye; it then exits without acting. A nil Guard does nothing.
func (g *Guard) Release() {
	if g != nil {
		_, _ = g.w.Write([]byte{done})
		g.w.Close()
	}
}
