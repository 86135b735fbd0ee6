package cpu

import (
	"bufio"
	"bytes"
	"cmp"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/asrprof/asrprof/internal/proctree"
)

// KernelFile is the mapping name of kernel frames.
const KernelFile = "[kernel.kallsyms]"

// mapping is one executable line of /proc/PID/maps.
type mapping = proctree.Mapping

// find returns the mapping holding addr.
func findMapping(ms []mapping, addr uint64) (mapping, bool) {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Limit > addr })
	if i < len(ms) && ms[i].Start <= addr {
		return ms[i], true
	}
	return mapping{}, false
}

// symbol is a function's address range in a symbol table.
type symbol struct {
	Addr, Size uint64
	Name       string
}

// symtab holds the function symbols of one file (or of the kernel),
// sorted by address, and the file's loadable segments.
type symtab struct {
	syms  []symbol
	loads []elf.ProgHeader
	// why says why some of the file's addresses may have no name: it
	// has no .symtab (only its exported .dynsym) and no debug file was
	// found for it; "" when it has a full symbol table.
	why string
}

// lookup returns the name of the function covering addr: the symbol with
// the highest address at or below addr, if its size covers addr (a symbol
// of size 0 covers up to the next symbol).
func (t *symtab) lookup(addr uint64) (string, bool) {
	if t == nil {
		return "", false
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].Addr > addr }) - 1
	if i < 0 {
		return "", false
	}
	s := t.syms[i]
	if s.Size > 0 && addr >= s.Addr+s.Size {
		return "", false
	}
	return s.Name, true
}

// vaddr converts an offset in the file to the virtual address the ELF
// file's symbols use, through the loadable segment holding it.
func (t *symtab) vaddr(off uint64) uint64 {
	for _, p := range t.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr
		}
	}
	return off
}

// newSymtab sorts syms and drops duplicates of one address, keeping the
// first given.
func newSymtab(syms []symbol, loads []elf.ProgHeader) *symtab {
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Addr < syms[j].Addr })
	syms = slices.CompactFunc(syms, func(a, b symbol) bool { return a.Addr == b.Addr })
	return &symtab{syms: syms, loads: loads}
}

// DebugDir is where separate debug files are installed (Debian's -dbgsym
// and -dbg packages, Fedora's debuginfo): .build-id/xx/rest.debug by
// build-id, or the file's own path under it.
const DebugDir = "/usr/lib/debug"

// readELFSymtab reads the function symbols of .symtab and .dynsym. A
// stripped file (no .symtab) gets those of its separate debug file when
// one is installed under debugDir (debugFile); else its symtab says why
// its static functions have no names.
func readELFSymtab(path, debugDir string) (*symtab, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var syms []symbol
	// add keeps the functions of ss, their names cut at a version ('@')
	// unless whole is set (a debug file's names are kept whole).
	add := func(ss []elf.Symbol, err error, whole bool) {
		for _, s := range ss {
			t := elf.ST_TYPE(s.Info)
			if err != nil || (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Value == 0 || s.Section == elf.SHN_UNDEF {
				continue
			}
			name := s.Name
			if i := strings.IndexByte(name, '@'); i > 0 && !whole { // versioned dynsym
				name = name[:i]
			}
			syms = append(syms, symbol{Addr: s.Value, Size: s.Size, Name: name})
		}
	}
	why := ""
	if f.Section(".symtab") == nil {
		dbg, tried := debugFile(f, path, debugDir)
		if df, err := elf.Open(dbg); dbg != "" && err == nil {
			ss, err := df.Symbols()
			add(ss, err, true)
			df.Close()
		} else {
			why = "stripped (no .symtab) and no debug file (" + tried + "): install its debug symbols (Debian: its -dbgsym package)"
		}
	}
	ss, err := f.Symbols()
	add(ss, err, false)
	ss, err = f.DynamicSymbols()
	add(ss, err, false)
	// Go binaries name their functions in .gopclntab too, which stays
	// when the symbol table is stripped (go build -ldflags=-s; go test
	// and go run strip by default).
	syms = append(syms, goFuncs(f)...)
	var loads []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p.ProgHeader)
		}
	}
	t := newSymtab(syms, loads)
	t.why = why
	return t, nil
}

// debugFile finds the separate debug file of f (at path) under debugDir:
// by its GNU build-id (.build-id/xx/rest.debug), else at its own path
// with .debug added. It returns the file ("" for none) and what was
// tried, for the reason a frame stays unnamed.
func debugFile(f *elf.File, path, debugDir string) (string, string) {
	var tried []string
	if id := buildID(f); id != "" {
		p := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
		if _, err := os.Stat(p); err == nil {
			return p, ""
		}
		tried = append(tried, "build-id "+id)
	}
	// The file's own path, as the process sees it (file reads it
	// through /proc/PID/root, for containers).
	if rest, ok := strings.CutPrefix(path, "/proc/"); ok {
		if _, after, ok := strings.Cut(rest, "/root/"); ok {
			path = "/" + after
		}
	}
	p := filepath.Join(debugDir, path+".debug")
	if _, err := os.Stat(p); err == nil {
		return p, ""
	}
	tried = append(tried, p)
	return "", strings.Join(tried, ", ")
}

// buildID is f's GNU build-id in hex, "" when it has none.
func buildID(f *elf.File) string {
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return ""
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		return ""
	}
	order := f.ByteOrder
	namesz, descsz, typ := order.Uint32(b[0:4]), order.Uint32(b[4:8]), order.Uint32(b[8:12])
	off := 12 + (namesz+3)&^3
	if typ != 3 || uint32(len(b)) < off+descsz || descsz < 2 { // NT_GNU_BUILD_ID
		return ""
	}
	return fmt.Sprintf("%x", b[off:off+descsz])
}

// goFuncs returns the functions of a Go binary's .gopclntab, nil for
// other files or when it cannot be read.
func goFuncs(f *elf.File) []symbol {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	data, err := pcln.Data()
	if err != nil {
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	out := make([]symbol, 0, len(tab.Funcs))
	for _, fn := range tab.Funcs {
		if fn.End > fn.Entry {
			out = append(out, symbol{Addr: fn.Entry, Size: fn.End - fn.Entry, Name: fn.Name})
		}
	}
	return out
}

// parseKallsyms reads the text symbols of /proc/kallsyms. It returns nil
// when every address reads as zero (kptr_restrict hides them).
func parseKallsyms(r io.Reader) (*symtab, error) {
	var syms []symbol
	nonzero := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// "address type name [module]": split by hand, allocating only the
		// names kept (a kernel has ~100,000 lines; this runs at start-up).
		line := sc.Bytes()
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || len(line) < sp+4 || line[sp+2] != ' ' {
			continue
		}
		switch line[sp+1] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		a, err := strconv.ParseUint(string(line[:sp]), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %q: %w", sc.Text(), err)
		}
		name := line[sp+3:]
		if end := bytes.IndexAny(name, " \t"); end >= 0 {
			name = name[:end]
		}
		if len(name) == 0 {
			continue
		}
		if a != 0 {
			nonzero = true
		}
		syms = append(syms, symbol{Addr: a, Name: string(name)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !nonzero {
		return nil, nil
	}
	return newSymtab(syms, nil), nil
}

// fileKey names a file by device and inode, so that processes (and
// containers) sharing a library share its symbols.
type fileKey struct {
	dev   string
	inode uint64
	path  string
}

// symbolizer turns addresses into frames, caching symbol tables per file
// and the last memory map read per process (processes that exited are
// symbolized with their last known map). It is not safe for concurrent
// use.
type symbolizer struct {
	files map[fileKey]*symtab // nil entry: the file could not be read
	// unnamed counts, per file, the frames left without a function
	// name, and why; read by Unnamed from other goroutines.
	unnamedMu sync.Mutex
	unnamed   map[string]*unnamedFile
	maps      map[int][]mapping
	perf      map[int]*symtab // perf maps (perfmap.go), re-read with the memory map
	kernel    *symtab
	kloaded   bool
}

func newSymbolizer() *symbolizer {
	return &symbolizer{files: make(map[fileKey]*symtab), maps: make(map[int][]mapping), perf: make(map[int]*symtab),
		unnamed: make(map[string]*unnamedFile)}
}

// unnamedFile is a file whose frames were left without a name.
type unnamedFile struct {
	frames int
	why    string
}

// noteUnnamed counts a frame of path left without a name, and why.
func (s *symbolizer) noteUnnamed(path, why string) {
	s.unnamedMu.Lock()
	defer s.unnamedMu.Unlock()
	u := s.unnamed[path]
	if u == nil {
		u = &unnamedFile{why: why}
		s.unnamed[path] = u
	}
	u.frames++
}

// Unnamed says, per file whose frames were left as file+0xoffset, how
// many and why, the files with the most first: "libfoo.so.3 (1234
// frames): stripped (no .symtab) and no debug file (...)"; "" for none.
// It is safe to call while the symbolizer is in use.
func (s *symbolizer) Unnamed() string {
	if s == nil {
		return ""
	}
	s.unnamedMu.Lock()
	defer s.unnamedMu.Unlock()
	paths := slices.SortedFunc(maps.Keys(s.unnamed), func(a, b string) int {
		return cmp.Or(cmp.Compare(s.unnamed[b].frames, s.unnamed[a].frames), cmp.Compare(a, b))
	})
	var parts []string
	for _, p := range paths[:min(len(paths), 3)] {
		u := s.unnamed[p]
		why := cmp.Or(u.why, "no symbol covers those addresses")
		parts = append(parts, fmt.Sprintf("%s (%d stack frames): %s", filepath.Base(p), u.frames, why))
	}
	if len(paths) > 3 {
		parts = append(parts, fmt.Sprintf("%d files more", len(paths)-3))
	}
	return strings.Join(parts, "; ")
}

// refreshMaps re-reads /proc/PID/maps of pid, keeping the previous map
// when the process is gone.
func (s *symbolizer) refreshMaps(pid int) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	if err != nil {
		return
	}
	defer f.Close()
	if ms, err := proctree.ParseMaps(f); err == nil && len(ms) > 0 {
		s.maps[pid] = ms
	}
	if t := loadPerfMap(pid); t != nil {
		s.perf[pid] = t
	}
}

// refreshOnce re-reads pid's memory map the first time one collection of
// samples meets pid (seen records it), so that libraries mapped since the
// last refresh are named.
func (s *symbolizer) refreshOnce(seen map[int]bool, pid int) {
	if !seen[pid] {
		seen[pid] = true
		s.refreshMaps(pid)
	}
}

// forgetUnless drops the cached maps of the processes that are neither
// watched nor were seen in the collection just made.
func (s *symbolizer) forgetUnless(watched, seen map[int]bool) {
	for pid := range s.maps {
		if !watched[pid] && !seen[pid] {
			delete(s.maps, pid)
			delete(s.perf, pid)
		}
	}
}

// callSite is the address to look up for frame i (leaf first) of a stack
// at addr: a return address, for every frame but the leaf, so that the
// call is the instruction before.
func callSite(i int, addr uint64) uint64 {
	if i > 0 && addr > 0 {
		return addr - 1
	}
	return addr
}

// user symbolizes the user stack addrs (leaf first) of process pid.
func (s *symbolizer) user(pid int, addrs []uint64) []Frame {
	ms := s.maps[pid]
	out := make([]Frame, 0, len(addrs))
	for i, a := range addrs {
		look := callSite(i, a)
		m, ok := findMapping(ms, look)
		if !ok {
			out = append(out, Frame{Func: "[unknown]", Addr: a, File: "[unknown]"})
			continue
		}
		if m.Inode == 0 && s.perf[pid] != nil {
			if fr, ok := perfFrame(s.perf[pid], a, look); ok {
				out = append(out, fr)
				continue
			}
		}
		fr := Frame{Addr: a, File: cmp.Or(m.Path, "[anon]"), Start: m.Start, Limit: m.Limit, Offset: m.Offset}
		off := look - m.Start + m.Offset
		why := "an anonymous mapping (JIT code without a perf map)"
		switch {
		case m.Inode != 0 && strings.HasPrefix(m.Path, "/"):
			why = "no symbol table could be read"
			if t := s.file(pid, m); t != nil {
				fr.Func, _ = t.lookup(t.vaddr(off))
				why = t.why
			}
		case strings.HasPrefix(m.Path, "[vdso]") || strings.HasPrefix(m.Path, "[vsyscall]"):
			why = "the kernel's vDSO (no file on disk to read symbols from)"
		}
		if fr.Func == "" {
			fr.Func = fmt.Sprintf("%s+0x%x", filepath.Base(fr.File), off)
			s.noteUnnamed(fr.File, why)
		}
		out = append(out, fr)
	}
	return out
}

// file returns the symbol table of m's file, read through the process's
// root so that containers' files are found; nil when it cannot be read.
func (s *symbolizer) file(pid int, m mapping) *symtab {
	k := fileKey{m.Dev, m.Inode, m.Path}
	if t, ok := s.files[k]; ok {
		return t
	}
	path := strings.TrimSuffix(m.Path, " (deleted)")
	t, err := readELFSymtab(filepath.Join("/proc", strconv.Itoa(pid), "root", path), DebugDir)
	if err != nil {
		t, _ = readELFSymtab(path, DebugDir)
	}
	s.files[k] = t
	return t
}

// kernelFrames symbolizes kernel stack addrs (leaf first) with
// /proc/kallsyms, read once.
func (s *symbolizer) kernelFrames(addrs []uint64) []Frame {
	if !s.kloaded {
		s.kloaded = true
		if f, err := os.Open("/proc/kallsyms"); err == nil {
			s.kernel, _ = parseKallsyms(f) // unreadable: kernel frames stay unnamed
			f.Close()
		}
	}
	out := make([]Frame, 0, len(addrs))
	for i, a := range addrs {
		name, ok := s.kernel.lookup(callSite(i, a))
		if !ok {
			name = "[kernel]"
		}
		out = append(out, Frame{Func: name, Addr: a, File: KernelFile})
	}
	return out
}

// native names a native frame that the library gives as a file's base
// name, the mapping's file offset and an address in the file's ELF
// virtual address space: it finds the file in the process's memory map
// and looks the address up in its symbol table. It returns the function
// (file+0xaddr when no symbol covers it) and the file's path.
func (s *symbolizer) native(pid int, base string, off, addr uint64) (string, string) {
	var found *mapping
	for i, m := range s.maps[pid] {
		if m.Inode == 0 || filepath.Base(strings.TrimSuffix(m.Path, " (deleted)")) != base {
			continue
		}
		if found == nil || m.Offset == off {
			found = &s.maps[pid][i]
		}
	}
	if found != nil {
		if name, ok := s.file(pid, *found).lookup(addr); ok {
			return name, found.Path
		}
		return fmt.Sprintf("%s+0x%x", base, addr), found.Path
	}
	base = cmp.Or(base, "[unknown]")
	return fmt.Sprintf("%s+0x%x", base, addr), base
}
