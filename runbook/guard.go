package runbook

// The server's guard: when asrprof ends without stopping a server it
// started (SIGKILL, the OOM killer, a crash), the guard stops the server
// as Stop does and hides its credentials in server.log. Without it such a
// server kept its port and GPU, the next run refused to start, and the
// log kept the key.
//
// The guard is this executable re-executed with guardEnv set, in a
// process group of its own (a Ctrl-C at the terminal reaches asrprof, not
// it); the init below turns that process into the guard before anything
// else of the program runs, as the co-runner's does. Its stdin is a pipe
// that only asrprof holds: a first line with what to guard, then the byte
// guardDone once Stop is done. End of file before that byte means
// asrprof is gone.

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
)

// guardExe is the guard's executable: this one (a test makes it fail).
var guardExe = os.Executable

// guardEnv, when set, makes this process a server's guard.
const guardEnv = "ASRPROF_SERVER_GUARD"

const guardDone = 'x'

// guardSpec is the guard's first line. The secrets go through the pipe,
// not the environment or argv, which other users may read.
type guardSpec struct {
	PID     int           `json:"pid"`
	Log     string        `json:"log"`
	Grace   time.Duration `json:"grace_ns"`
	Secrets []string      `json:"secrets"`
	Owner   int           `json:"owner"` // asrprof's pid, for the log's line
}

func init() {
	if os.Getenv(guardEnv) != "" {
		os.Exit(guardMain(os.Stdin))
	}
}

// guardMain waits on in; when it ends before guardDone it stops the
// server's group and scrubs its log. It returns the exit status.
func guardMain(in io.Reader) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	r := bufio.NewReader(in)
	line, err := r.ReadBytes('\n')
	var g guardSpec
	if err == nil {
		err = json.Unmarshal(line, &g)
	}
	if err != nil || g.PID <= 0 {
		fmt.Fprintf(os.Stderr, "server guard: bad spec %q: %v\n", line, err)
		return 2
	}
	if b, err := r.ReadByte(); err == nil && b == guardDone {
		return 0
	}
	s := &Server{PID: g.PID, LogPath: g.Log, secrets: g.Secrets} // exited nil: not our child
	err = s.stop(context.Background(), g.Grace)
	s.scrubLog()
	if f, ferr := os.OpenFile(g.Log, os.O_WRONLY|os.O_APPEND, 0); ferr == nil {
		what := "stopped"
		if err != nil {
			what = err.Error()
		}
		fmt.Fprintf(f, "asrprof (pid %d) ended without stopping this server (pid %d); its guard stopped it: %s\n", g.Owner, g.PID, what)
		f.Close()
	}
	return 0
}

// startGuard starts s's guard and returns the pipe's write end; on an
// error the server runs unguarded, as before there were guards.
func startGuard(s *Server, grace time.Duration) (io.WriteCloser, error) {
	exe, err := guardExe()
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(guardSpec{PID: s.PID, Log: s.LogPath, Grace: grace, Secrets: s.secrets, Owner: os.Getpid()})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"asrprof", fmt.Sprintf("(guard of server pid %d)", s.PID)} // what ps shows; the env decides
	cmd.Env = append(os.Environ(), guardEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	go cmd.Wait() // reaped when it ends; it outlives asrprof only when asrprof dies first
	if _, err := w.Write(append(spec, '\n')); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// releaseGuard tells the guard that Stop is done.
func (s *Server) releaseGuard() {
	if s.guard != nil {
		_, _ = s.guard.Write([]byte{guardDone})
		s.guard.Close()
	}
}
