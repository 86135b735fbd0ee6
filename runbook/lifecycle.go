package runbook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/asrprof/asrprof/internal/guard"
	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/internal/secret"
	"github.com/asrprof/asrprof/probe/doctor"
)

// Errors of the server lifecycle. Each is wrapped with details (the log
// tail, the GPU readings) and tested with errors.Is.
var (
	// ErrServerExited: the server process exited before it became healthy.
	ErrServerExited = errors.New("server exited during start-up")
	// ErrStartupTimeout: the server did not become healthy in time.
	ErrStartupTimeout = errors.New("server did not become healthy")
	// ErrPortBusy: something already answers on the target's port.
	ErrPortBusy = errors.New("target port already answers")
	// ErrStopFailed: processes of the server's group survived SIGKILL.
	ErrStopFailed = proctree.ErrStopFailed
	// ErrGPUBusy: GPU memory stayed above the limit after the server stopped.
	ErrGPUBusy = errors.New("GPU memory not freed")
	// ErrBadCommand: the server command cannot be split or run as given.
	ErrBadCommand = errors.New("bad server command")
)

// LogFile is the name of the server's log inside a run's sub-bundle.
const LogFile = "server.log"

// LogTailLines is how many lines of server.log an error shows.
const LogTailLines = 20

// SplitCommand splits a command line into words the way a POSIX shell
// would for a simple command: blanks separate words, single quotes keep
// everything literally, double quotes keep everything but \" \\ \$ \`,
// a backslash outside quotes escapes the next character and a
// backslash-newline joins lines. Nothing is expanded ($VAR, ~, globs), and
// shell syntax outside quotes (| & ; < > ( ) $ `) or a leading VAR=value is
// refused with a hint to write `sh -c '...'`: the command is executed
// directly, so the first word's process is the server the probes watch.
func SplitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
	)
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			flush()
		case c == '\\':
			if i+1 >= len(rs) {
				return nil, fmt.Errorf("%w: %q ends with a backslash", ErrBadCommand, s)
			}
			i++
			if rs[i] == '\n' {
				continue
			}
			cur.WriteRune(rs[i])
			in = true
		case c == '\'':
			j := slices.Index(rs[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("%w: unterminated single quote in %q", ErrBadCommand, s)
			}
			cur.WriteString(string(rs[i+1 : i+1+j]))
			in = true
			i += j + 1
		case c == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\"\\$`\n", rs[j+1]) {
					j++
					if rs[j] != '\n' {
						cur.WriteRune(rs[j])
					}
					continue
				}
				cur.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("%w: unterminated double quote in %q", ErrBadCommand, s)
			}
			in = true
			i = j
		case strings.ContainsRune("|&;<>()$`", c):
			return nil, fmt.Errorf("%w: %q uses shell syntax (%q); the command runs without a shell, so write it as: sh -c '...'",
				ErrBadCommand, s, string(c))
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	flush()
	if len(words) == 0 {
		return nil, fmt.Errorf("%w: the server command is empty", ErrBadCommand)
	}
	if k, _, ok := strings.Cut(words[0], "="); ok && k != "" && !strings.Contains(k, "/") {
		return nil, fmt.Errorf("%w: %q starts with a variable assignment; set it in asrprof's environment or write: env %s ...",
			ErrBadCommand, s, words[0])
	}
	return words, nil
}

// ReadCommandFile reads a server command from a file: lines starting with
// # are comments, a backslash at the end of a line continues it, and the
// rest is split with SplitCommand.
func ReadCommandFile(path string) (string, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("reading server command file: %w", err)
	}
	lines := slices.DeleteFunc(strings.Split(string(b), "\n"), func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "#") })
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	argv, err := SplitCommand(text)
	if err != nil {
		return "", nil, fmt.Errorf("server command file %s: %w", path, err)
	}
	return text, argv, nil
}

// Server is a server process started in its own process group.
type Server struct {
	PID     int // also the process group id
	LogPath string
	Started time.Time
	// GuardErr: the guard (internal/guard) did not start; nil when it did.
	GuardErr error

	log     *os.File
	secrets []string      // credentials of its command and environment (secret.Values), scrubbed from the log at the stop
	guard   *guard.Guard  // nil without one
	exited  chan struct{} // closed when the leader has been waited for
	waitErr error         // valid after exited is closed
	stopped sync.Once
	stopErr error
}

// StartServer runs argv (argv[0] looked up in PATH) in a new process
// group with env, its stdout and stderr appended to logPath, and starts
// its guard, which stops it with grace should asrprof end first. It does
// not wait for anything; call WaitHealthy, then Stop.
func StartServer(argv, env []string, logPath string, grace time.Duration) (*Server, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: the server command is empty", ErrBadCommand)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening server log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log // the same *os.File: the child writes it directly
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("%w: starting %s: %v", ErrBadCommand, argv[0], err)
	}
	s := &Server{PID: cmd.Process.Pid, LogPath: logPath, Started: time.Now(), log: log, exited: make(chan struct{}),
		secrets: secret.Values(argv, env)}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if s.guard, err = guard.Start(guard.Spec{PID: s.PID, What: "server", Log: logPath, Grace: grace, Secrets: s.secrets}); err != nil {
		s.GuardErr = fmt.Errorf("its guard did not start (%v): if asrprof is killed, the server keeps running", err)
	}
	return s, nil
}

// Exited reports whether the server's leader process has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// WaitHealthy polls healthURL until it answers 200. It stops waiting at
// once when the server process exits (ErrServerExited) and after timeout
// (ErrStartupTimeout); both errors end with the last lines of server.log.
// It does not stop the server.
func (s *Server) WaitHealthy(ctx context.Context, healthURL string, timeout time.Duration) error {
	cl := &http.Client{Timeout: 5 * time.Second}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		if s.Exited() {
			return fmt.Errorf("%w (%v) before %s answered; last lines of %s:\n%s",
				ErrServerExited, exitText(s.waitErr), healthURL, s.LogPath, s.LogTail(LogTailLines))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		if err != nil {
			return fmt.Errorf("health URL %q: %w", healthURL, err)
		}
		resp, err := cl.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = "HTTP " + strconv.Itoa(resp.StatusCode)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exited:
			// checked at the top of the loop
		case <-deadline.C:
			return fmt.Errorf("%w: %s not 200 after %s (last: %s); last lines of %s:\n%s",
				ErrStartupTimeout, healthURL, timeout, last, s.LogPath, s.LogTail(LogTailLines))
		case <-tick.C:
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// LogTail returns the last n lines of the server's log, "(empty)" when
// there are none.
func (s *Server) LogTail(n int) string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const window = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	off := max(st.Size()-window, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return "(" + err.Error() + ")"
	}
	text := strings.TrimRight(string(b), "\n")
	if strings.TrimSpace(text) == "" {
		return "  (empty)"
	}
	lines := strings.Split(string(secret.Scrub([]byte(text), s.secrets)), "\n")
	return "  | " + strings.Join(lines[max(0, len(lines)-n):], "\n  | ")
}

// Stop ends the whole process group: SIGTERM to the group (and to
// descendants that left it with setsid), then SIGKILL after grace, then it
// waits until none of them is left (zombies not counted). ErrStopFailed
// lists the pids that survived. Calling Stop again returns the first
// result.
func (s *Server) Stop(ctx context.Context, grace time.Duration) error {
	s.stopped.Do(func() {
		s.stopErr = proctree.StopGroup(ctx, s.PID, grace, s.Exited)
		s.log.Close()
		secret.ScrubFile(s.LogPath, s.secrets) // a server that logs its arguments (vLLM) logs its --api-key
		s.guard.Release()
	})
	return s.stopErr
}

// HealthURL returns explicit, or target + "/health".
func HealthURL(target, explicit string) string {
	return cmp.Or(explicit, strings.TrimRight(target, "/")+"/health")
}

// PortAnswers reports whether a TCP connection to target's host and port
// (doctor.TargetPort) succeeds (something listens there), and the address
// it tried.
func PortAnswers(ctx context.Context, target string) (bool, string, error) {
	u, err := url.Parse(target)
	port, perr := doctor.TargetPort(target)
	if err != nil || u.Host == "" || perr != nil {
		return false, "", fmt.Errorf("target %q: not a URL", target)
	}
	addr := net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, addr, nil
	}
	c.Close()
	return true, addr, nil
}
