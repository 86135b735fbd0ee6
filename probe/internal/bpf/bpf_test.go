package bpf

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/need"
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
		b := make([]byte, len(tt.b))
		for i, c := range tt.b {
			b[i] = byte(c)
		}
		if got := Comm(b); got != tt.want {
			t.Errorf("Comm(%q) = %q, want %q", b, got, tt.want)
		}
	}
}

// newMap returns a BPF map for the test, closed at its end.
func newMap(t *testing.T, spec *ebpf.MapSpec) *ebpf.Map {
	t.Helper()
	need.Root(t, "to create BPF maps")
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestWatch(t *testing.T) {
	m := newMap(t, &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 1, MaxEntries: 2})
	watched := map[int]bool{}
	var added, unwatched []int
	add := func(pid int) { added = append(added, pid) }
	unwatch := func(pid int) { unwatched = append(unwatched, pid) }
	if err := Watch("p: ", m, watched, []int{1, 2}, unwatch, add); err != nil {
		t.Fatal(err)
	}
	if err := Watch("p: ", m, watched, []int{2, 3, 2}, unwatch, add); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(watched, map[int]bool{2: true, 3: true}) || len(added) != 3 || len(unwatched) != 1 || unwatched[0] != 1 {
		t.Errorf("watched %v, added %v, unwatched %v; want 2 and 3, three added, 1 unwatched", watched, added, unwatched)
	}
	var v uint8
	for pid, want := range map[uint32]bool{1: false, 2: true, 3: true} {
		if err := m.Lookup(pid, &v); (err == nil) != want {
			t.Errorf("map holds %d: %v, want %v", pid, err == nil, want)
		}
	}
	// The map is full: the new pid stays out, and the error says which.
	err := Watch("p: ", m, watched, []int{2, 3, 4}, nil, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "p: watching 4: ") || watched[4] {
		t.Errorf("Watch into a full map = %v, watched %v; want p: watching 4: ..., 4 not watched", err, watched)
	}
}

func TestForgetThreads(t *testing.T) {
	m := newMap(t, &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 8})
	for _, tid := range []uint32{1, 2} {
		if err := m.Put(tid, uint64(tid)); err != nil {
			t.Fatal(err)
		}
	}
	threads := map[uint32]string{1: "alive", 2: "dead", 3: "dead"} // 3: not in the map
	err := ForgetThreads("p", m, threads, func(tid uint32, s string) (any, uint32, bool) { return tid, tid, s == "dead" })
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(threads, map[uint32]string{1: "alive"}) {
		t.Errorf("threads = %v, want only 1", threads)
	}
	var v uint64
	if m.Lookup(uint32(1), &v) != nil || m.Lookup(uint32(2), &v) == nil {
		t.Error("want 1 kept in the map and 2 deleted")
	}
	threads = map[uint32]string{5: "dead"}
	err = ForgetThreads("p", m, threads, func(tid uint32, s string) (any, uint32, bool) { return "a bad key", tid, true })
	if err == nil || !strings.HasPrefix(err.Error(), "p: forgetting thread 5: ") || len(threads) != 0 {
		t.Errorf("ForgetThreads with a bad key = %v, threads %v; want p: forgetting thread 5: ..., and 5 forgotten", err, threads)
	}
}

func TestCounters(t *testing.T) {
	m := newMap(t, &ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	n := ebpf.MustPossibleCPU()
	for i := range uint32(2) {
		per := make([]uint64, n)
		for c := range per {
			per[c] = uint64(i+1) * uint64(c+1)
		}
		if err := m.Put(i, per); err != nil {
			t.Fatal(err)
		}
	}
	a, b := uint64(100), uint64(0)
	if err := Counters(m, &a, &b); err != nil {
		t.Fatal(err)
	}
	sum := uint64(n * (n + 1) / 2)
	if a != 100+sum || b != 2*sum {
		t.Errorf("Counters = %d, %d; want %d, %d (added to what was there)", a, b, 100+sum, 2*sum)
	}
	if err := Counters(m, &a, &b, &a); err == nil {
		t.Error("Counters past the map's end: no error")
	}
}

type closer struct {
	log *[]string
	err error
}

func (c closer) Close() error {
	*c.log = append(*c.log, c.err.Error())
	return c.err
}

type fakeLink struct {
	link.Link
	closer
}

func (l fakeLink) Close() error { return l.closer.Close() }

func TestClose(t *testing.T) {
	var log []string
	err := Close([]link.Link{fakeLink{closer: closer{&log, errors.New("l1")}}, fakeLink{closer: closer{&log, errors.New("l2")}}},
		closer{&log, errors.New("c1")}, closer{&log, errors.New("c2")})
	if strings.Join(log, " ") != "l1 l2 c1 c2" || err == nil || err.Error() != "l1\nl2\nc1\nc2" {
		t.Errorf("closed %v, error %q; want links then closers in order, every error", log, err)
	}
}

func TestLoad(t *testing.T) {
	need.Root(t, "to lift the memlock limit")
	var objs struct{ loaded bool }
	load := func(obj any, _ *ebpf.CollectionOptions) error {
		obj.(*struct{ loaded bool }).loaded = true
		return nil
	}
	if err := Load(&objs, load, "BPF program"); err != nil || !objs.loaded {
		t.Fatalf("Load = %v, loaded %v", err, objs.loaded)
	}
	for _, tt := range []struct {
		err  error
		also []error
		want bool
	}{
		{unix.EPERM, nil, true},
		{unix.ENOENT, nil, false},
		{unix.ENOENT, []error{unix.ENOENT}, true},
	} {
		err := Load(&objs, func(any, *ebpf.CollectionOptions) error { return tt.err }, "BPF programs", tt.also...)
		if err == nil || !strings.HasPrefix(err.Error(), "loading BPF programs: ") || errors.Is(err, probe.ErrNotSupported) != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Load failing with %v (also %v) = %v; want loading BPF programs: %v, ErrNotSupported %v", tt.err, tt.also, err, tt.err, tt.want)
		}
	}
}
