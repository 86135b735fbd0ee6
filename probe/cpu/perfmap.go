package cpu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/internal/proctree"
)

// Perf maps name code that a runtime generated at run time, in anonymous
// memory, where no ELF symbol table reaches: /tmp/perf-PID.map, one line
// per function, "START SIZE NAME" (hexadecimal, without 0x). CPython 3.12
// and later write one when started with -X perf or PYTHONPERFSUPPORT=1:
// each Python function then runs through a small trampoline named
// "py::QUALNAME:FILENAME", which the frame-pointer walk passes through
// (on builds with frame pointers, such as Ubuntu 24.04's and Fedora's).
// That is how the frame-pointer sampler names Python functions; it gives
// neither lines nor the frames of CPython builds without frame pointers.

// readPerfMap reads a perf map. Lines that do not parse are skipped.
func readPerfMap(r io.Reader) *symtab {
	var syms []symbol
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		start, rest, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		size, name, ok := strings.Cut(rest, " ")
		if !ok || name == "" {
			continue
		}
		a, err1 := strconv.ParseUint(strings.TrimPrefix(start, "0x"), 16, 64)
		n, err2 := strconv.ParseUint(strings.TrimPrefix(size, "0x"), 16, 64)
		if err1 != nil || err2 != nil || n == 0 {
			continue
		}
		syms = append(syms, symbol{Addr: a, Size: n, Name: name})
	}
	if len(syms) == 0 {
		return nil
	}
	return newSymtab(syms, nil)
}

// perfMapPath is where process pid's perf map is, seen from here: the
// process writes /tmp/perf-<its own pid>.map in its own mount and pid
// namespaces.
func perfMapPath(pid int) string {
	ns := pid
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status")); err == nil {
		if v, ok := proctree.StatusField(string(b), "NSpid"); ok {
			if n, err := strconv.Atoi(v[strings.LastIndexAny(v, " \t")+1:]); err == nil {
				ns = n
			}
		}
	}
	return filepath.Join("/proc", strconv.Itoa(pid), "root", "tmp", fmt.Sprintf("perf-%d.map", ns))
}

// loadPerfMap reads pid's perf map, if it has one.
func loadPerfMap(pid int) *symtab {
	f, err := os.Open(perfMapPath(pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	return readPerfMap(f)
}

// perfFrame names an address in anonymous memory from the process's perf
// map: a CPython trampoline becomes a Python frame (PythonFile, with the
// source file), any other entry a frame of the "[perf-map]" mapping.
func perfFrame(t *symtab, addr, look uint64) (Frame, bool) {
	name, ok := t.lookup(look)
	if !ok {
		return Frame{}, false
	}
	if rest, ok := strings.CutPrefix(name, "py::"); ok {
		fn, src, _ := strings.Cut(rest, ":")
		return Frame{Func: fn, Addr: addr, File: PythonFile, Source: src}, true
	}
	return Frame{Func: name, Addr: addr, File: "[perf-map]"}, true
}

// perfSupportHint says how to get Python functions from the frame-pointer
// sampler when the target is a CPython that could write a perf map (3.12
// or later, by its executable's name) and has none; "" otherwise.
func perfSupportHint(pid int) string {
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return ""
	}
	var minor int
	if n, _ := fmt.Sscanf(filepath.Base(exe), "python3.%d", &minor); n != 1 || minor < 12 {
		return ""
	}
	if _, err := os.Stat(perfMapPath(pid)); err == nil {
		return "Python functions named from the target's perf map"
	}
	return fmt.Sprintf("the target runs CPython 3.%d without a perf map: start it with PYTHONPERFSUPPORT=1 to see Python functions", minor)
}
