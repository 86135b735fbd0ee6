// Package bpf holds what the eBPF probes (probe/sched, probe/cuda,
// probe/cpu's sampler) share about talking to the kernel: loading their
// objects and closing them with their links (Load, Close), telling "not
// allowed here" from "failed" (NotSupported), keeping the map of watched
// processes (Watch), forgetting exited threads' entries (ForgetThreads),
// reading a map's entries (Each), summing per-CPU counters (Counters), and
// reading the names the BPF programs copy from task_struct (Comm).
package bpf

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/probe"
)

// NotSupported wraps err with probe.ErrNotSupported when it says that the
// kernel or our permissions do not allow it: EPERM, EACCES,
// ebpf.ErrNotSupported, or any of also (errors that mean the same for one
// probe's calls, such as ENOENT from perf_event_open). Otherwise it
// returns err as it is. The wrapped error still matches err with
// errors.Is.
func NotSupported(err error, also ...error) error {
	notAllowed := append([]error{unix.EPERM, unix.EACCES, ebpf.ErrNotSupported}, also...)
	if slices.ContainsFunc(notAllowed, func(e error) bool { return errors.Is(err, e) }) {
		return fmt.Errorf("%w: %w", probe.ErrNotSupported, err)
	}
	return err
}

// Load removes the memlock limit and loads a probe's BPF objects with
// their bpf2go loader; what names them in the error ("loading BPF
// program: ..."). Errors wrap probe.ErrNotSupported as NotSupported(err,
// also...) says.
func Load(objs any, load func(any, *ebpf.CollectionOptions) error, what string, also ...error) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("memlock: %w", NotSupported(err, also...))
	}
	if err := load(objs, nil); err != nil {
		return fmt.Errorf("loading %s: %w", what, NotSupported(err, also...))
	}
	return nil
}

// Close closes a probe's links, then each of closers in order (its ring
// buffer's reader, its objects), and joins their errors.
func Close(links []link.Link, closers ...io.Closer) error {
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	for _, c := range closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// ForgetThreads deletes from threads, and from the BPF map m, the entries
// that exited says belong to a thread that has exited; exited also gives
// the entry's key in m and its thread id. An entry already missing from m
// is no error; the others are "<name>: forgetting thread <tid>: ...".
func ForgetThreads[K comparable, V any](name string, m *ebpf.Map, threads map[K]V, exited func(K, V) (key any, tid uint32, ok bool)) error {
	var errs []error
	for k, v := range threads {
		if key, tid, ok := exited(k, v); ok {
			if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("%s: forgetting thread %d: %w", name, tid, err))
			}
			delete(threads, k)
		}
	}
	return errors.Join(errs...)
}

// Watch brings m, a BPF map of watched processes (pid → 1), and watched,
// the pids it holds, to pids (a pid may repeat): it deletes the pids not
// wanted, then calls unwatched (when set), and puts the new ones, then
// calls added (when set). A pid whose update failed stays as it was; the
// errors are "<prefix>unwatching <pid>: ..." and "<prefix>watching <pid>: ...".
func Watch(prefix string, m *ebpf.Map, watched map[int]bool, pids []int, unwatched, added func(pid int)) error {
	want := make(map[int]bool, len(pids))
	for _, pid := range pids {
		want[pid] = true
	}
	var errs []error
	for pid := range watched {
		if want[pid] {
			continue
		}
		if err := m.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("%sunwatching %d: %w", prefix, pid, err))
			continue
		}
		delete(watched, pid)
		if unwatched != nil {
			unwatched(pid)
		}
	}
	for pid := range want {
		if watched[pid] {
			continue
		}
		if err := m.Put(uint32(pid), uint8(1)); err != nil {
			errs = append(errs, fmt.Errorf("%swatching %d: %w", prefix, pid, err))
			continue
		}
		watched[pid] = true
		if added != nil {
			added(pid)
		}
	}
	return errors.Join(errs...)
}

// Each calls fn with every entry of m, read as keys of type K and values
// of type V, and returns the iteration's error.
func Each[K, V any](m *ebpf.Map, fn func(K, V)) error {
	var (
		k K
		v V
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, v)
	}
	return it.Err()
}

// Counters adds to each of dsts the sum over CPUs of the entry of the
// same index (0, 1, ...) of m, a per-CPU array of counters.
func Counters(m *ebpf.Map, dsts ...*uint64) error {
	for i, dst := range dsts {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
			return err
		}
		for _, v := range per {
			*dst += v
		}
	}
	return nil
}

// Comm returns the NUL-terminated name in b, a char[16] comm field as
// bpf2go renders it (int8) or as read from a ring buffer record (byte).
func Comm[T int8 | byte](b []T) string {
	buf := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		buf = append(buf, byte(c))
	}
	return string(buf)
}
