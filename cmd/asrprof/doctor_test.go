package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/internal/fakeasr"
)

func TestDoctorCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runDoctor(context.Background(), nil, &out, &errb); err != nil {
		t.Fatalf("doctor: %v (%s)", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 7 {
		t.Fatalf("doctor printed %d lines, want one per machine check:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "ok   ") && !strings.HasPrefix(l, "no   ") {
			t.Errorf("line %q starts with neither ok nor no", l)
		}
		if strings.HasPrefix(l, "no   ") && !strings.Contains(l, " — ") && !strings.Contains(l, "clock offset") {
			t.Errorf("failed check without a fix: %q", l)
		}
	}
	if !strings.Contains(out.String(), "BTF present (/sys/kernel/btf/vmlinux)") {
		t.Errorf("no BTF line:\n%s", out.String())
	}

	for _, args := range [][]string{{"--pid", "x"}, {"extra"}, {"--pid", "-3"}} {
		if err := runDoctor(context.Background(), args, &out, &errb); !errors.Is(err, errUsage) {
			t.Errorf("doctor %q: %v, want a usage error", args, err)
		}
	}
	out.Reset()
	if err := runDoctor(context.Background(), []string{"--help"}, &out, &errb); !errors.Is(err, errHelp) || !strings.Contains(out.String(), "--target URL") {
		t.Errorf("--help: %v\n%s", err, out.String())
	}
}

// doctor --target reads /v1/models: the model capture's requests will
// name, or, from a server started with an API key, that it wants one;
// with --header it gets in.
func TestDoctorTargetModels(t *testing.T) {
	t.Parallel()
	srv := fakeasr.NewServer(t, fakeasr.Config{APIKey: "k-doctor", Model: "m1"})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `no   target models: GET /v1/models → 401: the server wants an API key — give capture (and doctor) --header "Authorization: Bearer KEY"`},
		{[]string{"--header", "Authorization: Bearer k-doctor"}, "ok   target models: /v1/models lists m1: capture's requests name it unless --model names another"},
	} {
		code, stdout, stderr := runCLI(append([]string{"doctor", "--target", srv.URL}, tc.args...)...)
		if code != exitOK || !strings.Contains(stdout, tc.want) {
			t.Errorf("doctor %v: exit %d, want 0 and %q\n%s%s", tc.args, code, tc.want, stdout, stderr)
		}
	}
	if code, _, stderr := runCLI("doctor", "--target", srv.URL, "--header", "Authorization Bearer k-doctor"); code != exitUsage || strings.Contains(stderr, "k-doctor") {
		t.Errorf("a malformed --header: exit %d, want %d without the key\n%s", code, exitUsage, stderr)
	}
}

// doctor --target on another machine says that the host probes watch
// this one, and how to run them on the server's host, not "pass --pid".
func TestDoctorRemoteTarget(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI("doctor", "--target", "http://198.51.100.7:8000")
	want := "no   target pid: 198.51.100.7 is not this machine — the host probes and the gpu probe watch this machine: run asrprof on the server's host, or give capture --agent URL"
	if !strings.Contains(stdout, want) {
		t.Errorf("doctor: exit %d, want %q\n%s%s", code, want, stdout, stderr)
	}
}
