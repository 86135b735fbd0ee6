package cpu

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/asrprof/asrprof/internal/proctree"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/watch"
)

// Defaults of the perf engine.
const (
	// DefaultMaxThreads bounds the threads the perf engine samples: one
	// perf event and one ring buffer each.
	DefaultMaxThreads = 256
	// DefaultPerfPages is the size of a thread's ring buffer in pages
	// (plus one page of metadata): 32 KiB holds ~30 samples of the deepest
	// stacks (127 frames), three times what a thread at 100 % of a core
	// writes at 99 Hz between two drains.
	DefaultPerfPages = 8
	// DefaultDrain is how often the perf engine empties the ring buffers.
	DefaultDrain = 100 * time.Millisecond
)

// perfDetail is the perf engine's line in Probe.Detail.
const perfDetail = "engine perf: perf events (unprivileged, user stacks only)"

// perfSampleType is what every sample record holds, in this order: the
// instruction pointer, pid and tid, the callchain.
const perfSampleType = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_CALLCHAIN

var _ Adapter = (*Perf)(nil)

// Perf is the unprivileged engine: one task-clock perf event per thread
// of the watched processes (perf_event_open with the thread's id and
// cpu -1), sampling at hz per second of the thread's CPU time, user mode
// only (exclude_kernel, exclude_hv, exclude_callchain_kernel: what
// kernel.perf_event_paranoid=2 lets an ordinary user do to their own
// processes). The kernel walks the user stack by frame pointers, as it
// does for the frame-pointer sampler, and writes each sample to the
// event's ring buffer, which Perf drains every DefaultDrain and before
// Reset and Collect. Threads are found by Watch (the probe's refresh);
// threads that exited lose their event there. Create it with NewPerf.
type Perf struct {
	maxThreads int // DefaultMaxThreads but in tests

	mu     sync.Mutex // guards everything below; the drain loop takes it
	attr   unix.PerfEventAttr
	events map[int]*perfEvent // by tid
	acc    perfCounts
	// The most threads left out at one Watch: by the bound (maxSkipped),
	// because the kernel refused their event (refused: another user's,
	// not dumpable), because no more ring buffer memory may be locked
	// (memFull).
	maxSkipped, refused, memFull int
	loop                         *watch.Loop // drains every DefaultDrain while started

	// Used by Watch and Collect only, which the probe never runs at once.
	sym  *symbolizer
	pids map[int]bool
}

// NewPerf returns a perf engine that does nothing until Start.
func NewPerf() *Perf {
	p := &Perf{maxThreads: DefaultMaxThreads}
	p.loop = watch.NewLoop(&p.mu, DefaultDrain, func() error { p.drainLocked(); return nil })
	return p
}

// Start checks that this process may open and map a perf event (on its
// own thread) and starts draining. It returns an error wrapping
// probe.ErrNotSupported, whose message says why in plain words, when
// perf events are refused here.
func (p *Perf) Start(ctx context.Context, hz int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loop.Running() {
		return errors.New("perf engine already started")
	}
	p.attr = unix.PerfEventAttr{ // the event opened on every thread
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_TASK_CLOCK,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      uint64(hz),
		Sample_type: perfSampleType,
		// Comm: the thread's renames come as PERF_RECORD_COMM, so samples
		// carry the name the thread had when sampled.
		Bits: unix.PerfBitDisabled | unix.PerfBitFreq | unix.PerfBitComm |
			unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv | unix.PerfBitExcludeCallchainKernel,
	}
	e, err := openPerfEvent(&p.attr, 0)
	switch {
	case err == nil:
	case errors.Is(err, errMlock), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM),
		errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		// The kernel or permissions refuse perf events: say why in plain words.
		return &plainError{msg: perfRefusal(err, readParanoid()), errs: []error{probe.ErrNotSupported, err}}
	default:
		return err
	}
	if err := e.close(); err != nil {
		return err
	}
	p.events = make(map[int]*perfEvent)
	p.acc = perfCounts{counts: make(map[perfKey]uint64), comms: make(map[int]string)}
	p.sym = newSymbolizer()
	p.pids = make(map[int]bool)
	p.loop.Start()
	return nil
}

func (p *Perf) drainLocked() {
	for _, e := range p.events {
		e.drain(&p.acc)
	}
}

// Watch samples the threads of pids: it opens an event on each new
// thread (up to the bound) and closes, after draining it, the event of
// each thread that is gone. A new process's memory map is read at once,
// so that it can be symbolized after it exits. It returns an error
// wrapping probe.ErrNotSupported when no thread is sampled because the
// kernel refused every event (the target is another user's).
func (p *Perf) Watch(pids []int) error {
	want := make(map[int]int) // tid → pid
	watched := make(map[int]bool, len(pids))
	for _, pid := range pids {
		if !watched[pid] && !p.pids[pid] {
			p.sym.refreshMaps(pid)
		}
		watched[pid] = true
		for _, tid := range proctree.Threads(pid) {
			want[tid] = pid
		}
	}
	p.pids = watched

	p.mu.Lock()
	defer p.mu.Unlock()
	have := make(map[int]int, len(p.events))
	for tid, e := range p.events {
		have[tid] = e.pid
	}
	plan := planThreads(have, want, p.maxThreads)
	var errs []error
	for _, tid := range plan.close {
		e := p.events[tid]
		e.drain(&p.acc)
		errs = append(errs, e.close())
		delete(p.events, tid)
		delete(p.acc.comms, tid)
	}
	var refusal error
	refused, memFull := 0, 0
	for i, th := range plan.open {
		e, err := openPerfEvent(&p.attr, th.tid)
		switch {
		case err == nil:
			e.pid = th.pid
			p.events[th.tid] = e
			p.acc.comms[th.tid] = proctree.Comm(th.pid, th.tid)
		case errors.Is(err, unix.ESRCH), errors.Is(err, unix.ENOENT):
			// The thread exited since it was listed.
		case errors.Is(err, errMlock):
			memFull = len(plan.open) - i
			refusal = cmp.Or(refusal, err)
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			refused++
			refusal = cmp.Or(refusal, err)
		default:
			errs = append(errs, err)
		}
		if memFull > 0 {
			break
		}
	}
	p.maxSkipped = max(p.maxSkipped, plan.skipped)
	p.refused = max(p.refused, refused)
	p.memFull = max(p.memFull, memFull)
	if len(p.events) == 0 && refusal != nil {
		errs = append(errs, &plainError{msg: threadRefusal(refusal, readParanoid()), errs: []error{probe.ErrNotSupported, refusal}})
	}
	return errors.Join(errs...)
}

// threadID is one thread of a process.
type threadID struct{ pid, tid int }

// threadPlan is what Watch changes: the events to open and close, and how
// many threads the bound leaves out.
type threadPlan struct {
	open    []threadID // in order of process, then thread id
	close   []int      // tids, sorted
	skipped int
}

// planThreads compares the threads that have an event (have: tid → pid)
// with those that should (want): a thread gone, or whose tid now belongs
// to another process, is closed; new threads are opened, in order of
// process and thread id, while fewer than limit events are open.
func planThreads(have, want map[int]int, limit int) threadPlan {
	var pl threadPlan
	kept := 0
	for tid, pid := range have {
		if want[tid] == pid {
			kept++
		} else {
			pl.close = append(pl.close, tid)
		}
	}
	slices.Sort(pl.close)
	for tid, pid := range want {
		if have[tid] != pid {
			pl.open = append(pl.open, threadID{pid, tid})
		}
	}
	slices.SortFunc(pl.open, func(a, b threadID) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid))
	})
	if room := max(limit-kept, 0); len(pl.open) > room {
		pl.skipped = len(pl.open) - room
		pl.open = slices.Clip(pl.open[:room])
		if room == 0 {
			pl.open = nil
		}
	}
	return pl
}

// Reset drops what was sampled so far.
func (p *Perf) Reset(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drainLocked()
	clear(p.acc.counts)
	return nil
}

// Collect returns the stacks sampled since the last Reset or Collect,
// symbolized as the frame-pointer sampler does (user frames only).
func (p *Perf) Collect(ctx context.Context) ([]Stack, error) {
	p.mu.Lock()
	p.drainLocked()
	counts := p.acc.counts
	p.acc.counts = make(map[perfKey]uint64, len(counts))
	p.mu.Unlock()

	var err error
	seen := make(map[int]bool)
	out := make([]Stack, 0, len(counts))
	for k, n := range counts {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
			break
		}
		pid := int(k.pid)
		p.sym.refreshOnce(seen, pid)
		out = append(out, Stack{PID: pid, TID: int(k.tid), Comm: k.comm, Count: n, Frames: p.sym.user(pid, k.addrs())})
	}
	p.sym.forgetUnless(p.pids, seen)
	return out, err
}

// PerfStats are the perf engine's counts since Start.
type PerfStats struct {
	Threads    int    // threads sampled now
	Samples    uint64 // samples read
	Lost       uint64 // samples the kernel dropped: a ring buffer was full
	Bad        uint64 // records that did not parse
	Skipped    int    // most threads left out by the bound at one refresh
	Refused    int    // most threads whose event the kernel refused at one refresh
	MemFull    int    // most threads left out at one refresh: no more ring buffer memory may be locked
	MaxThreads int    // the bound
}

// Stats returns the counts since Start.
func (p *Perf) Stats() PerfStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PerfStats{Threads: len(p.events), Samples: p.acc.samples, Lost: p.acc.lost, Bad: p.acc.bad,
		Skipped: p.maxSkipped, Refused: p.refused, MemFull: p.memFull, MaxThreads: p.maxThreads}
}

// Unnamed says which files' frames were left as file+0xoffset, and why
// (symbolizer.Unnamed).
func (p *Perf) Unnamed() string { return p.sym.Unnamed() }

// Losses says what the engine could not sample since Start; "" when
// nothing was lost.
func (p *Perf) Losses() string {
	s := p.Stats()
	var msgs []string
	if s.Lost > 0 {
		msgs = append(msgs, fmt.Sprintf("%d of %d samples lost (perf ring buffer full)", s.Lost, s.Samples+s.Lost))
	}
	if s.Skipped > 0 {
		msgs = append(msgs, fmt.Sprintf("up to %d threads not sampled: the bound of %d perf events was reached (threads are taken in order of process and thread id)", s.Skipped, s.MaxThreads))
	}
	if s.MemFull > 0 {
		msgs = append(msgs, fmt.Sprintf("up to %d threads not sampled: no more perf ring buffer memory may be locked (kernel.perf_event_mlock_kb, ulimit -l)", s.MemFull))
	}
	if s.Refused > 0 {
		msgs = append(msgs, fmt.Sprintf("up to %d threads not sampled: the kernel refused their perf event (another user's, or not dumpable)", s.Refused))
	}
	if s.Bad > 0 {
		msgs = append(msgs, fmt.Sprintf("%d perf records did not parse", s.Bad))
	}
	return strings.Join(msgs, "; ")
}

// Stop stops draining and closes every event.
func (p *Perf) Stop() error {
	return p.loop.Close(context.Background(), "perf", func() error {
		var errs []error
		for tid, e := range p.events {
			errs = append(errs, e.close())
			delete(p.events, tid)
		}
		return errors.Join(errs...)
	})
}

// errMlock marks a ring buffer that could not be mapped because no more
// memory may be locked.
var errMlock = errors.New("perf ring buffer memory limit")

// perfEvent is one thread's perf event and its mapped ring buffer.
type perfEvent struct {
	fd       int
	pid, tid int
	mem      []byte                  // the whole mapping
	meta     *unix.PerfEventMmapPage // its first page
	data     []byte                  // the ring: a power of two in size
}

// openPerfEvent opens attr on thread tid (0: the calling thread), maps a
// ring buffer of DefaultPerfPages pages to it and enables it.
func openPerfEvent(attr *unix.PerfEventAttr, tid int) (*perfEvent, error) {
	fd, err := unix.PerfEventOpen(attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open on thread %d: %w", tid, err)
	}
	ps := os.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (1+DefaultPerfPages)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEM) {
			err = fmt.Errorf("%w: %w", errMlock, err)
		}
		return nil, fmt.Errorf("mapping the perf ring buffer of thread %d: %w", tid, err)
	}
	meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))
	off, size := meta.Data_offset, meta.Data_size
	if size == 0 || off+size > uint64(len(mem)) { // kernels before 4.1 leave them 0
		off, size = uint64(ps), uint64(DefaultPerfPages*ps)
	}
	e := &perfEvent{fd: fd, tid: tid, mem: mem, meta: meta, data: mem[off : off+size]}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return nil, errors.Join(fmt.Errorf("enabling the perf event of thread %d: %w", tid, err), e.close())
	}
	return e, nil
}

// drain reads the records the kernel wrote since the last drain into c
// and frees their space. The perf ABI: data_head is read with acquire
// semantics before the records, data_tail written with release semantics
// after them (Go's atomics are sequentially consistent, which is more).
func (e *perfEvent) drain(c *perfCounts) {
	head := atomic.LoadUint64(&e.meta.Data_head)
	tail := atomic.LoadUint64(&e.meta.Data_tail)
	if err := readRing(e.data, tail, head, &c.scratch, c.record); err != nil {
		c.bad++
	}
	atomic.StoreUint64(&e.meta.Data_tail, head)
}

func (e *perfEvent) close() error {
	return errors.Join(unix.Munmap(e.mem), unix.Close(e.fd))
}

// readRing calls fn with each record (header included) between tail and
// head in data, a perf ring buffer's data area; tail and head are the
// free-running byte counts of the perf ABI, and data's size is a power of
// two. A record that wraps past the end of data is copied whole into
// *scratch first, so fn sees it contiguous; fn must not keep rec. It
// stops with an error at a record header that cannot be right (shorter
// than a header, or longer than what is left); the caller then drops the
// rest, up to head.
func readRing(data []byte, tail, head uint64, scratch *[]byte, fn func(typ uint32, rec []byte)) error {
	size := uint64(len(data))
	if size == 0 || size&(size-1) != 0 {
		return fmt.Errorf("perf ring of %d bytes: not a power of two", size)
	}
	if head-tail > size {
		return fmt.Errorf("perf ring: %d bytes pending in a ring of %d", head-tail, size)
	}
	var hdr [8]byte
	for tail < head {
		off := tail & (size - 1)
		for i := range hdr {
			hdr[i] = data[(off+uint64(i))&(size-1)]
		}
		typ := binary.NativeEndian.Uint32(hdr[0:4])
		n := uint64(binary.NativeEndian.Uint16(hdr[6:8]))
		if n < uint64(len(hdr)) || n > head-tail {
			return fmt.Errorf("perf ring: record of type %d and size %d at %d, %d bytes left", typ, n, tail, head-tail)
		}
		var rec []byte
		if off+n <= size {
			rec = data[off : off+n]
		} else {
			first := size - off
			*scratch = append(append((*scratch)[:0], data[off:]...), data[:n-first]...)
			rec = *scratch
		}
		fn(typ, rec)
		tail += n
	}
	return nil
}

// perfKey is one distinct stack of one thread under one name.
type perfKey struct {
	pid, tid int32
	comm     string
	stack    string // the user addresses, leaf first, 8 bytes each in host order
}

// addrs decodes k.stack.
func (k perfKey) addrs() []uint64 {
	out := make([]uint64, len(k.stack)/8)
	for i := range out {
		out[i] = binary.NativeEndian.Uint64([]byte(k.stack[8*i : 8*i+8]))
	}
	return out
}

// perfCounts is what the ring buffers said: samples counted by stack, the
// threads' names, and the losses.
type perfCounts struct {
	counts  map[perfKey]uint64
	comms   map[int]string // by tid: as read when the event was opened, then from PERF_RECORD_COMM
	samples uint64         // samples read
	lost    uint64         // samples dropped by the kernel (PERF_RECORD_LOST)
	bad     uint64         // records, or runs of records, that did not parse
	scratch []byte         // readRing's copy of a wrapped record
	key     []byte         // a stack being encoded
}

// Callchain context markers (PERF_CONTEXT_*, as unsigned addresses): any
// value at or above perfContextMax marks the start of a context.
const (
	perfContextUser = ^uint64(0) - 0x200 + 1 // -512
	perfContextMax  = ^uint64(0) - 0xfff + 1 // -4095
)

// record counts one record of a ring buffer (header included).
func (c *perfCounts) record(typ uint32, rec []byte) {
	body := rec[8:]
	ne := binary.NativeEndian
	switch typ {
	case unix.PERF_RECORD_SAMPLE:
		// u64 ip; u32 pid, tid; u64 nr; u64 ips[nr] (perfSampleType)
		if len(body) < 24 {
			c.bad++
			return
		}
		ip := ne.Uint64(body[0:])
		pid, tid := ne.Uint32(body[8:]), ne.Uint32(body[12:])
		nr := ne.Uint64(body[16:])
		if nr > uint64(len(body)-24)/8 {
			c.bad++
			return
		}
		// Keep the user context's addresses, dropping the markers (and a
		// kernel context, which exclude_callchain_kernel should leave out).
		c.key = c.key[:0]
		user := true
		for i := range nr {
			a := ne.Uint64(body[24+8*i:])
			if a >= perfContextMax {
				user = a == perfContextUser
				continue
			}
			if user {
				c.key = ne.AppendUint64(c.key, a)
			}
		}
		if len(c.key) == 0 {
			c.key = ne.AppendUint64(c.key, ip)
		}
		c.samples++
		c.counts[perfKey{pid: int32(pid), tid: int32(tid), comm: c.comms[int(tid)], stack: string(c.key)}]++
	case unix.PERF_RECORD_LOST:
		// u64 id; u64 lost
		if len(body) < 16 {
			c.bad++
			return
		}
		c.lost += ne.Uint64(body[8:])
	case unix.PERF_RECORD_COMM:
		// u32 pid, tid; char comm[] (NUL-terminated, padded to 8 bytes)
		if len(body) < 8 {
			c.bad++
			return
		}
		name := body[8:]
		if i := slices.Index(name, 0); i >= 0 {
			name = name[:i]
		}
		c.comms[int(ne.Uint32(body[4:]))] = string(name)
	}
	// Other records (throttling) say nothing about stacks.
}

// readParanoid returns kernel.perf_event_paranoid, or ok false when it
// cannot be read (no perf events in this kernel).
func readParanoid() paranoid {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if err != nil {
		return paranoid{}
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return paranoid{n, err == nil}
}

// paranoid is kernel.perf_event_paranoid, when known.
type paranoid struct {
	level int
	known bool
}

// String is the level, or "unknown".
func (pa paranoid) String() string {
	if !pa.known {
		return "unknown"
	}
	return strconv.Itoa(pa.level)
}

// perfRefusal says in plain words why perf events were refused, from the
// error of perf_event_open or of mapping the ring buffer.
func perfRefusal(err error, pa paranoid) string {
	switch {
	case errors.Is(err, errMlock):
		return fmt.Sprintf("the perf ring buffer may not be locked in memory (mmap: %s; kernel.perf_event_mlock_kb, ulimit -l)", errno(err))
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		if pa.known && pa.level <= 2 {
			// paranoid allows an ordinary user's own threads: something
			// else (a container's seccomp filter) refuses the call.
			return fmt.Sprintf("perf events are refused (perf_event_open: %v, although kernel.perf_event_paranoid=%s allows them: a seccomp filter, as in containers?)", errno(err), pa)
		}
		return fmt.Sprintf("perf events are refused (kernel.perf_event_paranoid=%s)", pa)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Sprintf("this kernel offers no perf events (perf_event_open: %s)", errno(err))
	}
	return fmt.Sprintf("perf events do not work here (%v)", err)
}

// threadRefusal says in plain words why no thread of the target could be
// sampled, when Start could open an event on its own thread: the
// target's threads are another user's (or not dumpable), or the ring
// buffers may not be locked.
func threadRefusal(err error, pa paranoid) string {
	if errors.Is(err, errMlock) {
		return perfRefusal(err, pa)
	}
	return fmt.Sprintf("perf events are refused for the target's threads (perf_event_open: %s): the target runs as another user, or is not dumpable, and with kernel.perf_event_paranoid=%s and no CAP_PERFMON only one's own processes may be sampled",
		errno(err), pa)
}

// errno names the errno err wraps (unix.ErrnoName of 0 if none).
func errno(err error) string {
	e, _ := errors.AsType[unix.Errno](err)
	return unix.ErrnoName(e)
}

// plainError is an error whose message is written for people, which
// still matches (errors.Is, errors.As) the errors it stands for.
type plainError struct {
	msg  string
	errs []error
}

func (e *plainError) Error() string   { return e.msg }
func (e *plainError) Unwrap() []error { return e.errs }

// cannotSample is auto mode's error when neither eBPF nor perf events may
// sample here: one line that says why. It wraps probe.ErrNotSupported
// when both were refused (rather than broken).
func cannotSample(bpfErr, perfErr error, euid int) error {
	var bpfWhy string
	switch {
	case euid != 0 && errors.Is(bpfErr, probe.ErrNotSupported):
		bpfWhy = "eBPF needs root or CAP_BPF+CAP_PERFMON"
	case errors.Is(bpfErr, probe.ErrNotSupported):
		bpfWhy = fmt.Sprintf("eBPF is refused (%v)", bpfErr)
	default:
		bpfWhy = fmt.Sprintf("the eBPF sampler did not start (%v)", bpfErr)
	}
	perfWhy := fmt.Sprintf("the perf engine did not start (%v)", perfErr)
	if pe := (*plainError)(nil); errors.As(perfErr, &pe) {
		perfWhy = pe.msg
	}
	msg := fmt.Sprintf("cannot sample: %s, and %s: no stacks", bpfWhy, perfWhy)
	if errors.Is(bpfErr, probe.ErrNotSupported) && errors.Is(perfErr, probe.ErrNotSupported) {
		return &plainError{msg: msg, errs: []error{probe.ErrNotSupported, bpfErr, perfErr}}
	}
	// One of them broke: the error must not read as "not supported".
	broken := slices.DeleteFunc([]error{bpfErr, perfErr}, func(err error) bool { return errors.Is(err, probe.ErrNotSupported) })
	return &plainError{msg: msg, errs: broken}
}
