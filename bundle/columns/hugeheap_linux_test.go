package columns

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// After hugeHeap, a large slice the tables would hold lands in heap that
// the kernel may back with huge pages: its mappings carry the
// MADV_HUGEPAGE mark ("hg" in /proc/self/smaps' VmFlags). Not all of it
// need: the slice may start in free heap just below hugeHeap's range (in
// about 1 run of 10 it began 3 MiB lower), and the mark starts at the
// range's first huge page boundary; so at least three quarters of it,
// read every 4 MiB.
func TestHugeHeapMarksTheHeap(t *testing.T) {
	// hugeHeap acts only in a small heap: what the package's earlier
	// tests left (96 MB of it made this test fail) is given back first,
	// as an analyze starts with a small one.
	debug.FreeOSMemory()
	hugeHeap(128 << 20)
	b := make([]int64, 8<<20) // 64 MB: a column of 8 million rows
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	var marked, read int
	var last string
	for off := uintptr(0); off < 64<<20; off += 4 << 20 {
		flags, err := vmFlags(start + off)
		if err != nil {
			t.Fatal(err)
		}
		read++
		if strings.Contains(" "+flags+" ", " hg ") {
			marked++
		} else {
			last = fmt.Sprintf("%#x: %q", start+off, flags)
		}
	}
	if 4*marked < 3*read {
		t.Errorf("the slice at %#x: %d of %d places read lie in a mapping with the hg (MADV_HUGEPAGE) mark, want 3/4 or more; without it, %s", start, marked, read, last)
	}
	b[0] = 1
}

// In a process whose heap is already large (the end of a long capture),
// hugeHeap allocates nothing: there its bytes could be reused heap that
// the runtime would clear first. In a small one it allocates its n.
func TestHugeHeapOnlyInASmallHeap(t *testing.T) {
	allocs := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	const n = 64 << 20
	debug.FreeOSMemory() // what other tests left is given back: a small heap
	// A bundle's sources larger than the machine's memory: a quarter of
	// it is asked for, not more (a mapping past it kills the process).
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	ram := si.Totalram * uint64(si.Unit)
	before := allocs()
	hugeHeap(int(4 * ram))
	if d := allocs() - before; d > ram/4+16<<20 || d < ram/4 {
		t.Errorf("hugeHeap(4 × %d bytes of memory) allocated %d bytes, want a quarter of the memory", ram, d)
	}
	debug.FreeOSMemory() // its range given back: the heap is small again
	before = allocs()
	hugeHeap(n)
	if d := allocs() - before; heapBytes() < 64<<20 && d < n {
		t.Errorf("a small heap: hugeHeap allocated %d bytes, want %d", d, n)
	}
	big := make([]byte, 96<<20)
	for i := range big {
		big[i] = 1
	}
	before = allocs()
	hugeHeap(n)
	if d := allocs() - before; d >= n {
		t.Errorf("a heap of %d bytes: hugeHeap allocated %d", heapBytes(), d)
	}
	runtime.KeepAlive(big)
	big = nil
	debug.FreeOSMemory()
}

// vmFlags is the VmFlags line of the mapping of /proc/self/smaps that
// holds addr.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping of /proc/self/smaps holds %#x", addr)
}
