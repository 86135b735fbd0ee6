package guard

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sleeper starts a process group that sleeps, and returns its leader.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func spec(t *testing.T, s Spec) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// End of file before the done byte: the group is stopped, the log's
// secrets hidden and the line appended. With the byte: nothing is done.
func TestGuardMain(t *testing.T) {
	log := filepath.Join(t.TempDir(), "server.log")
	os.WriteFile(log, []byte("serving with --api-key k-123\n"), 0o644)

	kept := sleeper(t)
	var stderr bytes.Buffer
	in := append(spec(t, Spec{PID: kept.Process.Pid, What: "server", Log: log, Secrets: []string{"k-123"}}), done)
	if code := Main(bytes.NewReader(in), &stderr); code != 0 || stderr.Len() > 0 {
		t.Fatalf("released: exit %d, stderr %q", code, stderr.String())
	}
	if err := kept.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("released, the guard stopped the group: %v", err)
	}

	gone := sleeper(t)
	exited := make(chan struct{})
	go func() { gone.Wait(); close(exited) }()
	in = spec(t, Spec{PID: gone.Process.Pid, What: "server", Log: log, Secrets: []string{"k-123"}, Grace: time.Second, Owner: 7})
	if code := Main(bytes.NewReader(in), &stderr); code != 0 {
		t.Fatalf("orphaned: exit %d, stderr %q", code, stderr.String())
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("orphaned: the group still runs")
	}
	b, _ := os.ReadFile(log)
	if want := "asrprof (pid 7) ended without stopping this server"; !strings.Contains(string(b), want) || strings.Contains(string(b), "k-123") {
		t.Errorf("log:\n%s\nwant %q and no key", b, want)
	}

	// A group that had ended: nothing stopped, nothing said.
	before, _ := os.ReadFile(log)
	stderr.Reset()
	in = spec(t, Spec{PID: gone.Process.Pid, What: "benchmark command", Owner: 7})
	if code := Main(bytes.NewReader(in), &stderr); code != 0 || stderr.Len() > 0 {
		t.Errorf("an ended group: exit %d, stderr %q, want nothing said", code, stderr.String())
	}
	if after, _ := os.ReadFile(log); !bytes.Equal(before, after) {
		t.Errorf("an ended group: the log changed:\n%s", after)
	}

	stderr.Reset()
	if code := Main(strings.NewReader("nonsense\n"), &stderr); code != 2 || !strings.Contains(stderr.String(), "bad spec") {
		t.Errorf("a bad spec: exit %d, stderr %q", code, stderr.String())
	}
}
