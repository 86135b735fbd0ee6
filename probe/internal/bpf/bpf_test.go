package bpf

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/probe"
)

func TestNotSupported(t *testing.T) {
	tests := []struct {
		err  error
		also []error
		want bool
	}{
		{fmt.Errorf("load: %w", unix.EPERM), nil, true},
		{fmt.Errorf("load: %w", unix.EACCES), nil, true},
		{fmt.Errorf("attach: %w", ebpf.ErrNotSupported), nil, true},
		{fmt.Errorf("load: %w", unix.EINVAL), nil, false},
		{fmt.Errorf("perf_event_open: %w", unix.ENOENT), nil, false},
		{fmt.Errorf("perf_event_open: %w", unix.ENOENT), []error{unix.ENOENT, unix.ENOSYS}, true},
		{fmt.Errorf("perf_event_open: %w", unix.ENOSYS), []error{unix.ENOENT, unix.ENOSYS}, true},
		{fmt.Errorf("load: %w", unix.EINVAL), []error{unix.ENOENT, unix.ENOSYS}, false},
	}
	for _, tt := range tests {
		got := NotSupported(tt.err, tt.also...)
		if is := errors.Is(got, probe.ErrNotSupported); is != tt.want {
			t.Errorf("NotSupported(%v, %v) is ErrNotSupported: %v, want %v", tt.err, tt.also, is, tt.want)
		}
		if !errors.Is(got, tt.err) {
			t.Errorf("NotSupported(%v, %v) lost the cause", tt.err, tt.also)
		}
	}
	if err := NotSupported(nil); err != nil {
		t.Errorf("NotSupported(nil) = %v, want nil", err)
	}
}

func TestComm(t *testing.T) {
	for _, tt := range []struct {
		b    []int8
		want string
	}{
		{[]int8{'a', 'b', 0, 'x'}, "ab"},
		{[]int8{'a', 'b', 'c'}, "abc"}, // no NUL: all of it
		{[]int8{0, 'x'}, ""},
		{nil, ""},
	} {
		if got := Comm(tt.b); got != tt.want {
			t.Errorf("Comm(%v) = %q, want %q", tt.b, got, tt.want)
		}
	}
}
