package columns

import (
	"runtime"
	"runtime/metrics"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeHeap asks the kernel to back the next n bytes of the Go heap with
// huge pages, before the tables of a large bundle are built from its
// JSONL or read: where transparent huge pages are on in madvise mode
// (Debian's default), the Go runtime never asks for them, and building the
// tables of 100,000 requests touches some 270 MB of fresh heap 4 KiB at a
// time (58,000 page faults; docs/PERFORMANCE.md, run R), reading them
// some 75 MB (12,000 faults, half the stage table's time; run T). It maps
// n bytes of heap without touching them, marks them MADV_HUGEPAGE, and
// frees them: the heap reuses that range first, and the mark stays with
// the mapping (the runtime's later MADV_DONTNEED keeps it). Where the
// kernel says no, nothing changes.
//
// Only in a process whose heap is still small (an analyze, not the end of
// a long capture): there the n bytes come fresh from the kernel, where in
// a large heap they could be memory already used, which the runtime would
// clear first. At most a quarter of the machine's memory is asked for:
// the kernel refuses a mapping past its memory (and a strict overcommit
// policy one past its commit limit), and the runtime dies of that refusal.
func hugeHeap(n int) {
	const huge = 2 << 20
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return
	}
	n = int(min(uint64(n), si.Totalram*uint64(si.Unit)/4))
	if n < 16*huge || heapBytes() > 32*huge {
		return
	}
	b := make([]byte, n) // fresh from the OS: not zeroed, not touched
	off := (huge - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%huge)) % huge
	if end := (n - off) / huge * huge; end > 0 {
		_ = unix.Madvise(b[off:off+end], unix.MADV_HUGEPAGE) // from its first huge page boundary
	}
	runtime.KeepAlive(b)
	b = nil
	runtime.GC() // frees the range for the heap to reuse
}

// heapBytes is the heap's memory that holds objects or held them and is
// not yet given back: what a large allocation might reuse.
func heapBytes() uint64 {
	ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(ms)
	var n uint64
	for _, m := range ms {
		if m.Value.Kind() == metrics.KindUint64 {
			n += m.Value.Uint64()
		}
	}
	return n
}
