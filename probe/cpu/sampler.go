package cpu

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe/internal/bpf"
)

// maxDepth is the number of frames a stack-trace map entry holds
// (MAX_DEPTH in the BPF program).
const maxDepth = 127

var _ Adapter = (*Sampler)(nil)

// Sampler is the frame-pointer sampler: a BPF perf_event program on a
// CPU-clock event per CPU that records user and kernel stacks of the
// watched processes by walking frame pointers (the kernel's perf
// callchain code). Frames of code built without frame pointers are lost
// from the first such function up. Create it with NewSampler.
type Sampler struct {
	objs   cpuObjects
	links  []link.Link
	fds    []int
	buf    uint32 // the buffer the BPF program fills
	sym    *symbolizer
	pids   map[int]bool
	loaded bool
}

// NewSampler returns a sampler that does nothing until Start.
func NewSampler() *Sampler { return &Sampler{} }

// Start loads the BPF program and opens a CPU-clock perf event at hz on
// every online CPU.
func (s *Sampler) Start(ctx context.Context, hz int) (err error) {
	if s.loaded {
		return errors.New("sampler already started")
	}
	if err := bpf.Load(&s.objs, loadCpuObjects, "BPF program", perfNotSupported...); err != nil {
		return err
	}
	s.loaded = true
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return fmt.Errorf("listing CPUs: %w", err)
	}
	cpus, err := bundle.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("listing CPUs: %w", err)
	}
	for _, cpu := range cpus {
		if err := ctx.Err(); err != nil {
			return err
		}
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: uint64(hz),
			Bits:   unix.PerfBitFreq,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("perf_event_open on CPU %d: %w", cpu, notSupported(err))
		}
		s.fds = append(s.fds, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: s.objs.OnSample, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			return fmt.Errorf("attaching to the perf event of CPU %d: %w", cpu, notSupported(err))
		}
		s.links = append(s.links, l)
	}
	s.sym = newSymbolizer()
	s.pids = make(map[int]bool)
	return nil
}

// perfNotSupported are the errors that, besides bpf.NotSupported's, say
// that the kernel or our permissions do not allow the sampler: for
// perf_event_open, ENOENT and ENOSYS (no such event, no perf events at
// all).
var perfNotSupported = []error{unix.ENOENT, unix.ENOSYS}

// notSupported wraps err with probe.ErrNotSupported when it says that the
// kernel or our permissions do not allow it (bpf.NotSupported with
// perfNotSupported).
func notSupported(err error) error {
	return bpf.NotSupported(err, perfNotSupported...)
}

// Unnamed says which files' frames were left as file+0xoffset, and why
// (symbolizer.Unnamed).
func (s *Sampler) Unnamed() string { return s.sym.Unnamed() }

// Watch replaces the set of sampled processes. It reads the memory map
// of each new process, so that one that exits before the period ends can
// still be symbolized.
func (s *Sampler) Watch(pids []int) error {
	return bpf.Watch("", s.objs.Watch, s.pids, pids, nil, s.sym.refreshMaps)
}

// flip makes the BPF program fill the other buffer and returns the maps
// of the one it filled until now. Programs that read the old index just
// before the flip finish within microseconds; flip waits a millisecond
// for them.
func (s *Sampler) flip() (counts, stacks *ebpf.Map, err error) {
	old := s.buf
	if err := s.objs.Control.Put(uint32(0), 1-old); err != nil {
		return nil, nil, fmt.Errorf("switching buffers: %w", err)
	}
	s.buf = 1 - old
	time.Sleep(time.Millisecond)
	if old == 0 {
		return s.objs.Counts0, s.objs.Stacks0, nil
	}
	return s.objs.Counts1, s.objs.Stacks1, nil
}

// drain reads and deletes every entry of the counts map.
func drain(counts *ebpf.Map) (map[cpuSkey]uint64, error) {
	out := make(map[cpuSkey]uint64)
	err := bpf.Each(counts, func(k cpuSkey, v uint64) { out[k] += v })
	return out, errors.Join(err, deleteKeys(counts, maps.Keys(out)))
}

// clearStacks deletes every entry of a stack-trace map.
func clearStacks(stacks *ebpf.Map) error {
	var ids []uint32
	err := bpf.Each(stacks, func(k uint32, _ [maxDepth]uint64) { ids = append(ids, k) })
	return errors.Join(err, deleteKeys(stacks, slices.Values(ids)))
}

// deleteKeys deletes keys from m; a key already gone is no error.
func deleteKeys[K any](m *ebpf.Map, keys iter.Seq[K]) error {
	var errs []error
	for k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Reset drops what was sampled so far.
func (s *Sampler) Reset(ctx context.Context) error {
	counts, stacks, err := s.flip()
	if err != nil {
		return err
	}
	_, err = drain(counts)
	return errors.Join(err, clearStacks(stacks))
}

// Collect returns the stacks sampled since the last Reset or Collect,
// symbolized with the processes' current memory maps (the last one read
// for processes that exited).
func (s *Sampler) Collect(ctx context.Context) ([]Stack, error) {
	counts, stacks, err := s.flip()
	if err != nil {
		return nil, err
	}
	raw, err := drain(counts)
	readStack := func(id int32) ([]uint64, bool) {
		if id < 0 {
			return nil, false
		}
		var v [maxDepth]uint64
		if err := stacks.Lookup(uint32(id), &v); err != nil {
			return nil, false
		}
		n := 0
		for n < len(v) && v[n] != 0 {
			n++
		}
		return v[:n], true
	}
	seen := make(map[int]bool)
	var out []Stack
	for k, n := range raw {
		if cerr := ctx.Err(); cerr != nil {
			err = errors.Join(err, cerr)
			break
		}
		pid := int(k.Tgid)
		s.sym.refreshOnce(seen, pid)
		st := Stack{PID: pid, TID: int(k.Tid), Comm: bpf.Comm(k.Comm[:]), Count: n}
		if addrs, ok := readStack(k.KernelStack); ok {
			st.Frames = append(st.Frames, s.sym.kernelFrames(addrs)...)
		}
		if addrs, ok := readStack(k.UserStack); ok {
			st.Frames = append(st.Frames, s.sym.user(pid, addrs)...)
		} else if k.UserStack != -int32(unix.EFAULT) {
			// The stacks map was full (-ENOMEM) or held another stack
			// in the slot (-EEXIST).
			st.Frames = append(st.Frames, Frame{Func: "[user stack lost]", File: "[unknown]"})
		}
		out = append(out, st)
	}
	err = errors.Join(err, clearStacks(stacks))
	s.sym.forgetUnless(s.pids, seen)
	return out, err
}

// Overhead is the cost of the sampler's BPF program.
type Overhead struct {
	// Runtime is the program's total run time; zero unless BPF statistics
	// are enabled (ebpf.EnableStats or sysctl kernel.bpf_stats_enabled=1).
	Runtime time.Duration
	// Runs is how many samples the program saw (all processes).
	Runs uint64
	// Samples is how many samples of watched processes it counted.
	Samples uint64
	// Lost counts samples of watched processes lost because the counts
	// map was full.
	Lost uint64
	// UserStacksLost counts samples counted without their user stack
	// (shown as "[user stack lost]"): the stack map was full or the
	// stack's hash bucket held another stack.
	UserStacksLost uint64
}

// Overhead returns the cumulative cost since Start.
func (s *Sampler) Overhead() (Overhead, error) {
	var o Overhead
	st, err := s.objs.OnSample.Stats()
	if err != nil {
		return o, fmt.Errorf("program stats: %w", err)
	}
	o.Runtime, o.Runs = st.Runtime, st.RunCount
	if err := bpf.Counters(s.objs.Stats, &o.Samples, &o.Lost, &o.UserStacksLost); err != nil {
		return o, fmt.Errorf("reading counters: %w", err)
	}
	return o, nil
}

// Losses says how many samples were lost, or kept without their user
// stack, since Start; "" when none were.
func (s *Sampler) Losses() string {
	o, err := s.Overhead()
	if err != nil || o.Lost+o.UserStacksLost == 0 {
		return ""
	}
	msg := ""
	if o.Lost > 0 {
		msg = fmt.Sprintf("%d samples lost (counts map full); ", o.Lost)
	}
	if o.Samples > 0 {
		return msg + fmt.Sprintf("%d of %d samples (%.1f %%) without their user stack (stack map full or hash collision), shown as [user stack lost]",
			o.UserStacksLost, o.Samples, 100*float64(o.UserStacksLost)/float64(o.Samples))
	}
	return msg + fmt.Sprintf("%d samples without their user stack", o.UserStacksLost)
}

// Stop detaches the program, closes the perf events and frees the maps.
func (s *Sampler) Stop() error {
	if !s.loaded {
		return nil
	}
	errs := []error{bpf.Close(s.links)}
	for _, fd := range s.fds {
		errs = append(errs, unix.Close(fd))
	}
	errs = append(errs, s.objs.Close())
	s.links, s.fds, s.objs, s.loaded = nil, nil, cpuObjects{}, false
	return errors.Join(errs...)
}
