package columns

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// After hugeHeap, a large slice the tables would hold lands in heap that
// the kernel may back with huge pages: past its first huge page boundary
// (2 MiB in at most) its mapping carries the MADV_HUGEPAGE mark ("hg" in
// /proc/self/smaps' VmFlags).
func TestHugeHeapMarksTheHeap(t *testing.T) {
	hugeHeap(128 << 20)
	b := make([]int64, 8<<20) // 64 MB: a column of 8 million rows
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))) + 4<<20
	flags, err := vmFlags(addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the slice at %#x lies in a mapping with VmFlags %q: no hg (MADV_HUGEPAGE)", addr, flags)
	}
	b[0] = 1
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
