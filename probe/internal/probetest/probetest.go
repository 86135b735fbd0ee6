// Package probetest holds test helpers for probes: Sink, an in-memory
// probe.Sink, and a workload child process with one busy and one sleeping
// thread of known names (StartWorkload), for checking what a probe
// attributes to which thread.
package probetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/probe"
)

var _ probe.Sink = (*Sink)(nil)

// Sink keeps appended records in memory, as JSON lines per file. The zero
// value is ready; Dir is returned by Path. It is safe for concurrent use.
type Sink struct {
	Dir string

	mu    sync.Mutex
	lines map[string][][]byte
}

// Append marshals rec to JSON and keeps it as a line of file.
func (s *Sink) Append(file string, rec any) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("marshaling record for %s: %w", file, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lines == nil {
		s.lines = make(map[string][][]byte)
	}
	s.lines[file] = append(s.lines[file], b)
	return nil
}

// Path returns name under Dir.
func (s *Sink) Path(name string) string { return filepath.Join(s.Dir, name) }

// Lines returns the JSON lines appended to file so far.
func (s *Sink) Lines(file string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.lines[file]...)
}

// Decode unmarshals every line of file into a new T.
func Decode[T any](s *Sink, file string) ([]T, error) {
	var out []T
	for i, l := range s.Lines(file) {
		var v T
		if err := json.Unmarshal(l, &v); err != nil {
			return out, fmt.Errorf("%s line %d: %w", file, i+1, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Thread names that the workload's threads set with PR_SET_NAME.
const (
	BusyName  = "asrp-busy"
	SleepName = "asrp-sleep"
)

// SleepInterval is how long the workload's sleeping thread sleeps between
// wake-ups.
const SleepInterval = 10 * time.Millisecond

const workloadEnv = "ASRPROF_PROBETEST_WORKLOAD"

// Workload is a running child process made by StartWorkload.
type Workload struct {
	PID      int
	BusyTID  int // spins on a CPU
	SleepTID int // sleeps SleepInterval at a time
}

// RunWorkloadIfChild runs the workload and exits when this process was
// started by StartWorkload; otherwise it returns at once. Call it first in
// TestMain of a package that uses StartWorkload.
func RunWorkloadIfChild() {
	if os.Getenv(workloadEnv) != "1" {
		return
	}
	if err := runWorkload(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// StartWorkload re-executes the test binary as a workload child (see
// RunWorkloadIfChild) and returns once its threads are named. The child is
// killed when the test ends.
func StartWorkload(tb testing.TB) *Workload {
	tb.Helper()
	// No async preemption, so the Go runtime does not park the busy thread;
	// enough Ps for both locked threads.
	pid, s := StartChild(tb, workloadEnv+"=1", "GODEBUG=asyncpreemptoff=1", "GOMAXPROCS=4")
	w := &Workload{PID: pid}
	if _, err := fmt.Sscanf(s, "busy=%d sleep=%d", &w.BusyTID, &w.SleepTID); err != nil {
		tb.Fatalf("workload said %q: %v", s, err)
	}
	return w
}

// StartChild re-executes the test binary (running no tests) with env added
// to its environment, for a TestMain that recognises it and runs a
// workload instead, and returns the child's pid and the first line it
// writes to stdout, failing the test when none comes within 10 s. When the
// test ends the child's stdin is closed and the child killed.
func StartChild(tb testing.TB, env ...string) (pid int, line string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("child stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("child stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting child: %v", err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- s
	}()
	select {
	case line = <-lines:
	case <-time.After(10 * time.Second):
		tb.Fatal("child wrote nothing within 10 s")
	}
	return cmd.Process.Pid, line
}

// Start starts p on target, writing to sink, and fails the test on any
// error but one wrapping probe.ErrNotSupported. That one is judged
// (NotSupported): when this machine could have run p ("this probe
// broke": it has BTF, the privileges, the memlock limit p needs) or the
// error is about the test's own target (no libcuda mapped by the stub
// program), the test fails everywhere; when the machine cannot, the test
// skips (the message is skip, then the error and what the machine lacks),
// and fails under CI, through internal/need. When the test ends p is
// stopped, and the test fails unless Stop returns nil within 5 s.
func Start(tb testing.TB, p probe.Probe, target probe.Target, sink probe.Sink, skip string) {
	tb.Helper()
	if err := p.Start(context.Background(), target, sink); err != nil {
		if errors.Is(err, probe.ErrNotSupported) {
			NotSupported(tb, p.Name(), skip, err)
		}
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			tb.Errorf("Stop: %v", err)
		}
	})
}

// BusyAndIdle returns the records of w's busy and sleeping threads among
// recs, of which thread gives the thread id and name, and checks their
// names. It fails the test when either thread has no record.
func BusyAndIdle[R any](tb testing.TB, w *Workload, recs []R, thread func(R) (tid int, name string)) (busy, idle R) {
	tb.Helper()
	byTID := make(map[int]R)
	for _, r := range recs {
		tid, _ := thread(r)
		byTID[tid] = r
	}
	busy, ok := byTID[w.BusyTID]
	if !ok {
		tb.Fatalf("no record for the busy thread %d in %d records", w.BusyTID, len(recs))
	}
	idle, ok = byTID[w.SleepTID]
	if !ok {
		tb.Fatalf("no record for the sleeping thread %d", w.SleepTID)
	}
	tb.Logf("busy:  %+v", busy)
	tb.Logf("sleep: %+v", idle)
	_, busyName := thread(busy)
	_, idleName := thread(idle)
	if busyName != BusyName || idleName != SleepName {
		tb.Errorf("names %q, %q; want %q, %q", busyName, idleName, BusyName, SleepName)
	}
	return busy, idle
}
