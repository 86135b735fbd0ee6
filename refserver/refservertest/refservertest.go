// Package refservertest starts the reference ASR server (refserver)
// for tests in any package, and finds or builds the reference dataset.
package refservertest

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/bundletest"
	"github.com/asrprof/asrprof/internal/need"
)

// Python is Debian's interpreter, the one that sees python3-pocketsphinx.
const Python = "/usr/bin/python3"

// Root returns the repository root (bundletest.Root).
func Root() string { return bundletest.Root() }

// RequirePocketSphinx skips the test where Debian's python3-pocketsphinx
// (and its English model) is missing, and fails it under CI
// (internal/need); `make test` installs both.
func RequirePocketSphinx(t testing.TB) {
	t.Helper()
	pyImport(t, "python3-pocketsphinx", "from pocketsphinx import pocketsphinx", "pocketsphinx")
	if _, err := os.Stat("/usr/share/pocketsphinx/model/en-us/en-us.lm.bin"); err != nil {
		need.Dep(t, "pocketsphinx-en-us (the PocketSphinx English model)", err)
	}
}

// RequireTorch skips the test where Debian's python3-torch (with numpy)
// is missing, and fails it under CI (internal/need); the whisper engine
// needs it and tools/deps.sh installs it.
func RequireTorch(t testing.TB) {
	t.Helper()
	pyImport(t, "python3-torch", "import torch, numpy", "torch and numpy")
}

// pyImport runs the import statement in Python, and names the Debian
// package dep as missing when it fails (need.Dep); what is what it imports.
func pyImport(t testing.TB, dep, statement, what string) {
	t.Helper()
	out, err := exec.Command(Python, "-c", statement).CombinedOutput()
	if err != nil {
		need.Dep(t, fmt.Sprintf("%s (%s cannot import %s: %s)", dep, Python, what, bytes.TrimSpace(out)), err)
	}
}

// Server is a running reference server.
type Server struct {
	URL    string
	Cmd    *exec.Cmd
	stderr *lockedBuffer
}

// PID is the server's process id.
func (s *Server) PID() int { return s.Cmd.Process.Pid }

// Prioritize runs the server, all its threads and children, at nice -15
// when the test runs as root (CI does), and does nothing otherwise. A
// test whose verdict is the server's own state wants it: make test runs
// packages side by side on two cores, and their load would hold the
// server's threads on the run queue, which the attribution rightly calls
// CPU contention. Call it right after Start.
func (s *Server) Prioritize(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	// PRIO_PGRP: every thread of every process in the server's group
	// (Start puts it in its own), and the threads made later inherit it.
	if err := syscall.Setpriority(syscall.PRIO_PGRP, s.PID(), -15); err != nil {
		t.Fatalf("renice the reference server (pgid %d) to -15: %v", s.PID(), err)
	}
}

// Log returns what the server wrote to stderr so far.
func (s *Server) Log() string { return s.stderr.String() }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listeningRE = regexp.MustCompile(`listening on (http://[0-9.]+:[0-9]+)`)

// Start runs refserver.py on a free loopback port with extra environment
// and flags, waits until /health answers 200, and stops it at cleanup.
func Start(t testing.TB, env []string, args ...string) *Server {
	t.Helper()
	RequirePocketSphinx(t)
	return start(t, env, args)
}

// StartWhisper is Start for the whisper engine (--engine whisper and
// args); it skips where torch is missing rather than pocketsphinx.
func StartWhisper(t testing.TB, env []string, args ...string) *Server {
	t.Helper()
	RequireTorch(t)
	return start(t, env, append([]string{"--engine", "whisper"}, args...))
}

func start(t testing.TB, env []string, args []string) *Server {
	t.Helper()
	script := filepath.Join(Root(), "refserver", "refserver.py")
	cmd := exec.Command(Python, append([]string{script, "--port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting refserver: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("refserver stderr:\n%s", s.Log())
		}
	})
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case s.URL = <-urlc:
	case <-time.After(30 * time.Second):
		t.Fatalf("refserver did not report its address; stderr:\n%s", s.Log())
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("refserver not healthy after 90 s (last: %v); stderr:\n%s", err, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var dataOnce sync.Mutex

// Refset returns the reference dataset's manifest, building it with
// refserver/data/make_refset.sh when it is missing (about 15 s).
func Refset(t testing.TB) string {
	t.Helper()
	return built(t, "refset")
}

// Diarset returns the diarization dataset's manifest (multi-speaker
// samples joined from refset clips, references in MOSS-Transcribe-Diarize's
// markup), building the refset and it when missing.
func Diarset(t testing.TB) string {
	t.Helper()
	Refset(t)
	return built(t, "diarset")
}

// built returns refserver/data/NAME/manifest.jsonl, running
// refserver/data/make_NAME.sh first when it is missing.
func built(t testing.TB, name string) string {
	t.Helper()
	dataOnce.Lock()
	defer dataOnce.Unlock()
	root := Root()
	manifest := filepath.Join(root, "refserver", "data", name, "manifest.jsonl")
	if _, err := os.Stat(manifest); err == nil {
		return manifest
	}
	cmd := exec.Command(filepath.Join(root, "refserver", "data", "make_"+name+".sh"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the %s: %v\n%s", name, err, out)
	}
	return manifest
}

// ShortClips writes a manifest of the n shortest clips of the refset (the
// espeak-ng en-us voice at 160 wpm), with absolute audio paths, into a
// folder of t's, and returns its path.
func ShortClips(t testing.TB, n int) string {
	t.Helper()
	return ShortClipsIn(t, t.TempDir(), n)
}

// ShortClipsIn is ShortClips writing into dir, for a manifest that
// outlives t (a capture that several tests read).
func ShortClipsIn(t testing.TB, dir string, n int) string {
	t.Helper()
	src := Refset(t)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	audio := filepath.Join(filepath.Dir(src), "audio")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if len(out) == n {
			break
		}
		if strings.Contains(line, `"es-`) && strings.Contains(line, "-en-us-160") {
			out = append(out, strings.Replace(line, `"audio":"audio/`, `"audio":"`+audio+`/`, 1))
		}
	}
	if len(out) < n {
		t.Fatalf("%s has %d short clips, want %d", src, len(out), n)
	}
	p := filepath.Join(dir, fmt.Sprintf("short%d.jsonl", n))
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
