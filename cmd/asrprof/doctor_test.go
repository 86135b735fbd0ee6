package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
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
