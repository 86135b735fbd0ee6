package need

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records whether the helper skipped or failed, and with what.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.failed, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Skip(args ...any) {
	f.skipped, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) { f.Skip(fmt.Sprintf(format, args...)) }

// run calls fn with a fake TB in a goroutine (Fatal and Skip end it).
func run(fn func(tb testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestDepSkipsOrFailsInCI(t *testing.T) {
	dep := func(tb testing.TB) { Dep(tb, "jaeger binary", errors.New("stat /x: no such file")) }
	t.Setenv("CI", "")
	if f := run(dep); !f.skipped || f.failed || f.msg != "missing dependency: jaeger binary (stat /x: no such file): install it with tools/deps.sh" {
		t.Errorf("without CI: skipped %v failed %v %q", f.skipped, f.failed, f.msg)
	}
	t.Setenv("CI", "1")
	if f := run(dep); f.skipped || !f.failed || f.msg != "CI: missing dependency: jaeger binary (stat /x: no such file): install it with tools/deps.sh" {
		t.Errorf("CI=1: skipped %v failed %v %q", f.skipped, f.failed, f.msg)
	}
	if f := run(func(tb testing.TB) { DepVia(tb, "jaeger", "tools/jaeger.sh", errors.New("gone")) }); !f.failed || !strings.HasSuffix(f.msg, "install it with tools/jaeger.sh") {
		t.Errorf("DepVia: %q", f.msg)
	}
}

func TestSkipFailsInCI(t *testing.T) {
	t.Setenv("CI", "")
	if f := run(func(tb testing.TB) { Skip(tb, "no %s", "BTF") }); !f.skipped || f.msg != "no BTF" {
		t.Errorf("without CI: %+v", f)
	}
	t.Setenv("CI", "true")
	if f := run(func(tb testing.TB) { Skip(tb, "no %s", "BTF") }); !f.failed || !strings.HasPrefix(f.msg, "CI: no BTF") {
		t.Errorf("CI: %+v", f)
	}
}

func TestBinary(t *testing.T) {
	t.Setenv("CI", "1")
	var got string
	if f := run(func(tb testing.TB) { got = Binary(tb, "sh") }); f.failed || f.skipped || got == "" {
		t.Errorf("sh: %+v %q", f, got)
	}
	f := run(func(tb testing.TB) { Binary(tb, "asrprof-no-such-binary") })
	if !f.failed || !strings.Contains(f.msg, "CI: missing dependency: asrprof-no-such-binary (") {
		t.Errorf("missing binary under CI: %+v", f)
	}
}

// Device skips everywhere, CI included, and fails only on the GPU host.
func TestDevice(t *testing.T) {
	dev := func(tb testing.TB) { Device(tb, "memlock 8 MiB") }
	t.Setenv("CI", "1")
	t.Setenv(DeviceEnv, "")
	if f := run(dev); !f.skipped || f.msg != "runs on the H200: make test-gpu (here: memlock 8 MiB)" {
		t.Errorf("CI: %+v", f)
	}
	t.Setenv(DeviceEnv, "1")
	if f := run(dev); !f.failed || !strings.Contains(f.msg, "memlock 8 MiB") {
		t.Errorf("%s=1: %+v", DeviceEnv, f)
	}
}
