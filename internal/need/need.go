// Package need is the one way a test says that it cannot run here. Under
// CI (the environment variable CI is set, as .ci/run sets it) tools/deps.sh
// has installed every dependency and the machine is root with the kernel
// features the tests use, so a test that would skip for a missing
// dependency or an unsupported kernel feature fails instead: a skip there
// would hide a broken set-up, or a broken probe, behind a pass. Elsewhere
// (a laptop, a sandbox) such a test skips and says what is missing and how
// to get it.
//
// Tests that can only run on the GPU host (an H200: NVML, CUDA, an
// unlimited memlock limit, CPython 3.12) call Device instead: they skip
// everywhere, CI included, and fail only where ASRPROF_DEVICE=1 says that
// this is the machine they are for (tools/test-gpu.sh sets it).
//
// Skips for testing.Short() are not this package's business: they hide
// nothing, `make test` never passes -short.
//
// need imports nothing of asrprof's, so that any package's tests may use it.
package need

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// DeviceEnv is the environment variable that marks the GPU host, where
// the tests that call Device must run (tools/test-gpu.sh sets it to 1).
const DeviceEnv = "ASRPROF_DEVICE"

// DepsScript is what installs the tests' dependencies.
const DepsScript = "tools/deps.sh"

// CI reports whether the tests run under CI ($CI set, as .ci/run does).
func CI() bool { return os.Getenv("CI") != "" }

// OnDevice reports whether this is the GPU host ($ASRPROF_DEVICE=1).
func OnDevice() bool { return os.Getenv(DeviceEnv) == "1" }

// Skip skips t with the message, or fails it where CI is set (the message
// then starts "CI: "). For a missing dependency prefer Dep, which says how
// to install it.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("CI: %s (a skip here would hide a failure)", msg)
	}
	t.Skip(msg)
}

// Dep skips t, or fails it under CI, for a dependency that is missing:
// what names it ("jaeger binary", "curl"), err says how it was found
// missing. The message says to install it with tools/deps.sh.
func Dep(t testing.TB, what string, err error) {
	t.Helper()
	DepVia(t, what, DepsScript, err)
}

// DepVia is Dep for a dependency that another script than tools/deps.sh
// installs (how: "tools/jaeger.sh").
func DepVia(t testing.TB, what, how string, err error) {
	t.Helper()
	msg := fmt.Sprintf("missing dependency: %s (%v): install it with %s", what, err, how)
	if CI() {
		t.Fatal("CI: " + msg)
	}
	t.Skip(msg)
}

// Binary returns the path of the executable name on $PATH, or skips t (fails
// it under CI) naming it as a missing dependency.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Dep(t, name, err)
	}
	return p
}

// Root skips t (fails it under CI, where the tests run as root) unless
// the effective user is root; why says what needs it ("to load BPF
// programs").
func Root(t testing.TB, why string) {
	t.Helper()
	if euid := os.Geteuid(); euid != 0 {
		Skip(t, "needs root %s (euid %d)", why, euid)
	}
}

// Device marks a test that can only run on the GPU host: it skips t,
// saying where the test runs, everywhere but there; where ASRPROF_DEVICE=1
// (tools/test-gpu.sh on the GPU host) it fails t, since there nothing may
// be missing. CI does not make it fail: the CI machines are not the GPU
// host. why says what this machine lacks.
func Device(t testing.TB, why string) {
	t.Helper()
	if OnDevice() {
		t.Fatalf("%s=1 (the GPU host), yet: %s", DeviceEnv, why)
	}
	t.Skipf("runs on the H200: make test-gpu (here: %s)", why)
}
