package cpulimit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/need"
)

func busy(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// A quota of 0.2 cores holds a busy loop to about 0.2 cores, and the
// kernel says it throttled it.
func TestGroupQuota(t *testing.T) {
	g, err := NewGroup("/sys", fmt.Sprintf("asrprof-test-%d", os.Getpid()))
	if errors.Is(err, ErrNotSupported) {
		need.Skip(t, "no cgroup here: %v", err) // .ci/run: the CI machines can make cgroups (root)
	}
	if err != nil {
		t.Fatal(err)
	}
	pid := busy(t)
	if err := g.AddTree(pid); err != nil {
		t.Fatal(err)
	}
	if err := g.SetCores(0.2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(200 * time.Millisecond)
	c0, t0 := TreeCPUSeconds(pid), time.Now()
	time.Sleep(2 * time.Second)
	used := (TreeCPUSeconds(pid) - c0) / time.Since(t0).Seconds()
	if used > 0.3 || used < 0.05 {
		t.Errorf("%s at 0.2 cores: the loop used %.3f cores", g.Method, used)
	}
	if n, _, err := g.Throttled(); err != nil || n == 0 {
		t.Errorf("throttled periods %d (%v)", n, err)
	}
	t.Logf("%s %s: %.3f cores", g.Method, g.Dir, used)
}

// Where no hierarchy has the cpu controller, NewGroup says so as "not
// supported", naming what each lacked.
func TestNewGroupNotSupported(t *testing.T) {
	sys := t.TempDir()
	os.MkdirAll(filepath.Join(sys, "fs/cgroup/unified"), 0o755)
	os.WriteFile(filepath.Join(sys, "fs/cgroup/unified/cgroup.controllers"), []byte("memory pids"), 0o644)
	_, err := NewGroup(sys, "x")
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"without the cpu controller", "no cgroup v1 cpu controller"} {
		if !contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
}

// A fake v1 hierarchy: the files NewGroup and SetCores write.
func TestGroupV1Files(t *testing.T) {
	sys := t.TempDir()
	cpu := filepath.Join(sys, "fs/cgroup/cpu")
	os.MkdirAll(cpu, 0o755)
	os.WriteFile(filepath.Join(cpu, "cpu.cfs_quota_us"), []byte("-1"), 0o644)
	g, err := NewGroup(sys, "g")
	if err != nil || g.Method != CgroupV1 {
		t.Fatalf("%+v %v", g, err)
	}
	if err := g.SetCores(0.5); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(g.Dir, "cpu.cfs_quota_us"))
	p, _ := os.ReadFile(filepath.Join(g.Dir, "cpu.cfs_period_us"))
	if string(b) != "50000" || string(p) != "100000" {
		t.Errorf("quota %q period %q", b, p)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Pinning to one CPU: the affinity of every thread says so.
func TestPinTree(t *testing.T) {
	pid := busy(t)
	cpus, err := CPUs(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := PinTree(pid, cpus[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := CPUs(pid)
	if err != nil || len(got) != 1 || got[0] != cpus[0] {
		t.Errorf("affinity %v (%v), want [%d]", got, err, cpus[0])
	}
}

// The quota on the way up from a process's cgroup is its limit: the
// smallest one, in cores, v1 and v2 alike; no quota leaves 0.
func TestQuotaCores(t *testing.T) {
	sys := t.TempDir()
	put := func(rel, v string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("fs/cgroup/cpu/a/cpu.cfs_quota_us", "50000\n")
	put("fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n")
	put("fs/cgroup/cpu/a/b/cpu.cfs_quota_us", "-1\n")
	put("fs/cgroup/cpu/a/b/cpu.cfs_period_us", "100000\n")
	if got := quotaCores(sys, "4:memory:/x\n1:cpu:/a/b\n"); got != 0.5 {
		t.Errorf("v1 quota above the group: %g cores, want 0.5", got)
	}
	put("fs/cgroup/c/cpu.max", "max 100000\n")
	put("fs/cgroup/c/d/cpu.max", "25000 100000\n")
	if got := quotaCores(sys, "0::/c/d\n"); got != 0.25 {
		t.Errorf("v2 quota: %g cores, want 0.25", got)
	}
	if got := quotaCores(sys, "0::/c\n"); got != 0 {
		t.Errorf("v2 max: %g cores, want 0 (no quota)", got)
	}
}
